// Which rank of which attempt: the key of everything the daemon keeps per rank process.
#pragma once

#include <compare>
#include <string>

#include "absl/strings/str_cat.h"

namespace fp8::worker {

struct RankKey {
  std::string job_id;
  int attempt = 0;
  int rank = 0;

  auto operator<=>(const RankKey&) const = default;
  bool operator==(const RankKey&) const = default;
  // "job-7 attempt 2 rank 1", for log lines.
  std::string to_string() const { return absl::StrCat(job_id, " attempt ", attempt, " rank ", rank); }
};

}  // namespace fp8::worker
