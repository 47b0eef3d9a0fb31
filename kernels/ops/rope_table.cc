#include "ops/rope_table.h"

#include <cmath>

namespace fp8::ops {

RopeTable::RopeTable(int64_t seq, int64_t head_dim, double theta) : seq_(seq), head_dim_(head_dim), theta_(theta) {
  const int64_t pairs = head_dim / 2;
  cos_.resize(static_cast<size_t>(seq * pairs));
  sin_.resize(static_cast<size_t>(seq * pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (int64_t pos = 0; pos < seq; ++pos) {
      const double angle = static_cast<double>(pos) * inv_freq;
      cos_[static_cast<size_t>(pos * pairs + i)] = static_cast<float>(std::cos(angle));
      sin_[static_cast<size_t>(pos * pairs + i)] = static_cast<float>(std::sin(angle));
    }
  }
}

std::shared_ptr<const RopeTable> RopeTableCache::get(int64_t seq, int64_t head_dim, double theta) {
  const auto key = std::make_tuple(seq, head_dim, theta);
  std::lock_guard lock(mu_);
  if (auto it = tables_.find(key); it != tables_.end()) return it->second;
  if (tables_.size() >= kMaxEntries) tables_.clear();
  // Built under the lock: a few milliseconds at most, once per key.
  auto table = std::make_shared<const RopeTable>(seq, head_dim, theta);
  tables_.emplace(key, table);
  return table;
}

}  // namespace fp8::ops
