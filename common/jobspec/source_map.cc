#include "common/jobspec/source_map.h"

namespace fp8::jobspec {

void SourceMap::Record(const std::string& field_path, Location where) {
  locations_.insert_or_assign(field_path, std::move(where));
}

const Location* SourceMap::Find(std::string_view field_path) const {
  auto it = locations_.find(field_path);
  return it == locations_.end() ? nullptr : &it->second;
}

const Location* SourceMap::FindNearest(std::string_view field_path) const {
  for (std::string_view p = field_path; !p.empty(); p = ParentPath(p)) {
    if (const Location* at = Find(p)) return at;
  }
  return nullptr;
}

std::string_view ParentPath(std::string_view field_path) {
  if (!field_path.empty() && field_path.back() == ']') {
    size_t open = field_path.rfind('[');
    if (open != std::string_view::npos) return field_path.substr(0, open);
  }
  size_t dot = field_path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : field_path.substr(0, dot);
}

std::string JoinPath(std::string_view parent, std::string_view child) {
  std::string joined(parent);
  if (!joined.empty()) joined += '.';
  joined += child;
  return joined;
}

}  // namespace fp8::jobspec
