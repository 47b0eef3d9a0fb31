#include "common/jobspec/issues.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fp8::jobspec {
namespace {

constexpr size_t kMaxQuotedChars = 60;

std::optional<Location> locate(const Issue& issue, const SourceMap& where) {
  if (issue.at) return issue.at;
  // Exact matches first, so that an anchor that was written beats the section that merely
  // encloses the (defaulted) field.
  if (const Location* at = where.find(issue.field)) return *at;
  for (const std::string& anchor : issue.anchors) {
    if (const Location* at = where.find(anchor)) return *at;
  }
  if (const Location* at = where.find_nearest(issue.field)) return *at;
  for (const std::string& anchor : issue.anchors) {
    if (const Location* at = where.find_nearest(anchor)) return *at;
  }
  return std::nullopt;
}

std::string format_line(const Issue& issue, const std::optional<Location>& at,
                       std::string_view fallback_source) {
  std::string prefix;
  if (at && at->line > 0) {
    prefix = absl::StrCat(at->source, ":", at->line, ":", at->column, ": ");
  } else if (at) {
    prefix = absl::StrCat(at->source, ": ");
  } else if (!fallback_source.empty()) {
    prefix = std::string(fallback_source) + ": ";
  }
  if (issue.field.empty()) return absl::StrCat(prefix, issue.message);
  return absl::StrCat(prefix, issue.field, ": ", issue.message);
}

}  // namespace

absl::Status issues_to_status(const Issues& issues, const SourceMap& where, std::string_view source) {
  if (issues.empty()) return absl::OkStatus();
  struct Located {
    std::optional<Location> at;
    const Issue* issue;
    size_t order_found;
  };
  std::vector<Located> located;
  located.reserve(issues.size());
  for (size_t i = 0; i < issues.size(); ++i) {
    located.push_back({locate(issues[i], where), &issues[i], i});
  }
  auto sort_key = [](const Located& l) {
    bool unlocated = !l.at.has_value();
    int source_index = l.at ? l.at->source_index : 0;
    int line = l.at ? l.at->line : 0;
    int column = l.at ? l.at->column : 0;
    return std::make_tuple(unlocated, source_index, line, column, l.order_found);
  };
  std::sort(located.begin(), located.end(),
            [&](const Located& a, const Located& b) { return sort_key(a) < sort_key(b); });

  std::vector<std::string> lines;
  for (const Located& l : located) {
    std::string line = format_line(*l.issue, l.at, source);
    // The same problem reached twice (e.g. through two overrides of one field) is one line.
    if (std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(std::move(line));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

std::string path_part(std::string_view user_key) {
  std::string_view head = user_key.substr(0, kMaxQuotedChars);
  std::string shown = absl::CHexEscape(absl::string_view(head.data(), head.size()));
  return user_key.size() > kMaxQuotedChars ? shown + "..." : shown;
}

std::string quote(std::string_view user_text) { return absl::StrCat("'", path_part(user_text), "'"); }

}  // namespace fp8::jobspec
