#include "worker/engine/collectives/gloo_store_adapter.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fp8::engine::collectives {

absl::Duration GlooStoreAdapter::remaining() const { return std::max(deadline_ - absl::Now(), absl::ZeroDuration()); }

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_.set(prefix_ + key, std::string_view(data.data(), data.size()));
  if (!status.ok()) throw StoreFailure(std::move(status));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.get(prefix_ + key, remaining());
  if (!value.ok()) throw StoreFailure(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const std::string& key : keys) full_keys.push_back(prefix_ + key);
  absl::Status status = store_.wait(full_keys, remaining());
  if (!status.ok()) throw StoreFailure(std::move(status));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& /*timeout*/) {
  wait(keys);  // the rendezvous deadline, see the header
}

}  // namespace fp8::engine::collectives
