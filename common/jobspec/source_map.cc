#include "common/jobspec/source_map.h"

namespace fp8::jobspec {

void SourceMap::record(const std::string& field_path, Location where) {
  locations_.insert_or_assign(field_path, std::move(where));
}

const Location* SourceMap::find(std::string_view field_path) const {
  auto it = locations_.find(field_path);
  return it == locations_.end() ? nullptr : &it->second;
}

const Location* SourceMap::find_nearest(std::string_view field_path) const {
  for (std::string_view p = field_path; !p.empty(); p = parent_path(p)) {
    if (const Location* at = find(p)) return at;
  }
  return nullptr;
}

std::string_view parent_path(std::string_view field_path) {
  if (!field_path.empty() && field_path.back() == ']') {
    size_t open = field_path.rfind('[');
    if (open != std::string_view::npos) return field_path.substr(0, open);
  }
  size_t dot = field_path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : field_path.substr(0, dot);
}

std::string join_path(std::string_view parent, std::string_view child) {
  std::string joined(parent);
  if (!joined.empty()) joined += '.';
  joined += child;
  return joined;
}

}  // namespace fp8::jobspec
