#include "server/rendezvous/rendezvous_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fp8::server {
namespace {

// How often a blocked call looks at its caller's cancellation: short enough that a client
// that gave up frees its server thread quickly, long enough to cost nothing.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(100);

// Missing keys named in a DEADLINE_EXCEEDED message; a 4096-key wait would otherwise make
// a message of a megabyte.
constexpr size_t kKeysNamed = 16;

absl::Status validate_timeout(absl::Duration timeout) {
  if (timeout < absl::ZeroDuration() || timeout > RendezvousStore::kMaxTimeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", absl::ToInt64Milliseconds(timeout), " is outside [0, 600000]"));
  }
  return absl::OkStatus();
}

std::string name_keys(const std::vector<std::string>& keys) {
  if (keys.size() <= kKeysNamed) return absl::StrJoin(keys, ", ");
  std::vector<std::string> head(keys.begin(), keys.begin() + kKeysNamed);
  return absl::StrCat(absl::StrJoin(head, ", "), " and ", keys.size() - kKeysNamed, " more");
}

}  // namespace

absl::Status RendezvousStore::validate_namespace(std::string_view ns) {
  if (ns.empty()) return absl::InvalidArgumentError("rendezvous_namespace: empty");
  if (ns.size() > kMaxNamespaceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous_namespace: longer than ", kMaxNamespaceBytes, " bytes (", ns.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::validate_key(std::string_view key, std::string_view field) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": empty"));
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": longer than ", kMaxKeyBytes, " bytes (", key.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::usable(const std::string& ns) const {
  if (shut_down_) return absl::UnavailableError("the coordinator is shutting down; retry when it is back");
  if (closed_.count(ns) > 0) {
    return absl::AbortedError(absl::StrCat("rendezvous namespace ", ns, " was closed: its attempt ended"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::block_until(const std::string& ns, const std::function<bool()>& done,
                                          absl::Time deadline, const CancelledFn& cancelled) {
  while (true) {
    if (absl::Status s = usable(ns); !s.ok()) return s;
    if (done()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("");  // the caller names the keys
    if (cancelled && cancelled()) return absl::CancelledError("the caller cancelled the call");
    changed_.WaitWithDeadline(&mu_, cancelled ? std::min(deadline, now + kCancelPoll) : deadline);
  }
}

absl::Status RendezvousStore::set(std::string_view ns, std::string_view key, std::string_view value) {
  if (absl::Status s = validate_namespace(ns); !s.ok()) return s;
  if (absl::Status s = validate_key(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: longer than ", kMaxValueBytes, " bytes (", value.size(), ")"));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = usable(std::string(ns)); !s.ok()) return s;
  auto& keys = values_[std::string(ns)];
  auto it = keys.find(key);
  if (it != keys.end()) {
    it->second.assign(value);
  } else {
    if (keys.size() >= kMaxKeysPerNamespace) {
      return absl::ResourceExhaustedError(absl::StrCat("rendezvous namespace ", std::string(ns), " already holds ",
                                                       kMaxKeysPerNamespace, " keys; key ", std::string(key), " not set"));
    }
    keys.emplace(std::string(key), std::string(value));
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::get(std::string_view ns_view, std::string_view key,
                                                 absl::Duration timeout, const CancelledFn& cancelled) {
  if (absl::Status s = validate_namespace(ns_view); !s.ok()) return s;
  if (absl::Status s = validate_key(key); !s.ok()) return s;
  if (absl::Status s = validate_timeout(timeout); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + timeout;
  const std::string ns(ns_view);
  absl::MutexLock lock(&mu_);
  std::string value;
  const auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto n = values_.find(ns);
    if (n == values_.end()) return false;
    auto k = n->second.find(key);
    if (k == n->second.end()) return false;
    value = k->second;
    return true;
  };
  absl::Status s = block_until(ns, found, deadline, cancelled);
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous namespace ", ns, ": key ", std::string(key), " not set within ",
                                                    absl::ToInt64Milliseconds(timeout), " ms"));
  }
  if (!s.ok()) return s;
  return value;
}

absl::Status RendezvousStore::wait(std::string_view ns_view, const std::vector<std::string>& keys,
                                   absl::Duration timeout, const CancelledFn& cancelled) {
  if (absl::Status s = validate_namespace(ns_view); !s.ok()) return s;
  if (keys.empty()) return absl::InvalidArgumentError("keys: empty (wait for 1 to 4096 keys)");
  if (keys.size() > kMaxWaitKeys) {
    return absl::InvalidArgumentError(absl::StrCat("keys: ", keys.size(), " keys, more than ", kMaxWaitKeys));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = validate_key(keys[i], absl::StrCat("keys[", i, "]")); !s.ok()) return s;
  }
  if (absl::Status s = validate_timeout(timeout); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + timeout;
  const std::string ns(ns_view);
  absl::MutexLock lock(&mu_);
  std::vector<std::string> missing;
  const auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    missing.clear();
    auto n = values_.find(ns);
    for (const std::string& k : keys) {
      if (n == values_.end() || n->second.count(k) == 0) missing.push_back(k);
    }
    return missing.empty();
  };
  absl::Status s = block_until(ns, all_set, deadline, cancelled);
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous namespace ", ns, ": ", missing.size(), " of ",
                                                    keys.size(), " keys not set within ",
                                                    absl::ToInt64Milliseconds(timeout), " ms: ", name_keys(missing)));
  }
  return s;
}

void RendezvousStore::delete_namespace(std::string_view ns) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(ns);
  if (it != values_.end()) values_.erase(it);
  closed_.emplace(ns);
  changed_.SignalAll();
}

void RendezvousStore::shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  changed_.SignalAll();
}

size_t RendezvousStore::key_count(std::string_view ns) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(ns);
  return it == values_.end() ? 0 : it->second.size();
}

}  // namespace fp8::server
