#include "client/fp8ctl/progress_csv.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace fp8::ctl {
namespace {

// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
std::string field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\"", "\"\""}}), "\"");
}

std::string number(double v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string progress_csv(const std::vector<JobProgress>& jobs) {
  std::string out = "job_id,name,recipe,step,loss,val_loss,tokens_per_second\n";
  for (const JobProgress& j : jobs) {
    for (const auto& [step, p] : j.by_step) {
      absl::StrAppend(&out, field(j.job_id), ",", field(j.name), ",", field(j.recipe), ",", step, ",",
                      number(p.loss()), ",", p.has_val_loss() ? number(p.val_loss()) : "", ",",
                      number(p.tokens_per_second() * std::max(1, j.data_parallel_ranks)), "\n");
    }
  }
  return out;
}

}  // namespace fp8::ctl
