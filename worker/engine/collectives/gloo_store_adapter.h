// Gloo's rendezvous talks to a gloo::rendezvous::Store; this adapter backs one with our
// KeyValueStore, under a key prefix, and bounds every wait by the rendezvous deadline (not
// by the timeouts Gloo passes in: the whole rendezvous must end within the group's
// timeout, however many keys Gloo waits for one after another).
//
// Gloo's Store interface reports failure only by throwing. The adapter throws StoreFailure,
// which carries our absl::Status; the rendezvous catches it (gloo_rendezvous.cc) and no
// exception leaves this library.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/engine/collectives/kv_store.h"

namespace fp8::engine::collectives {

class StoreFailure : public std::runtime_error {
 public:
  explicit StoreFailure(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(KeyValueStore& store, std::string prefix, absl::Time deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  absl::Duration remaining() const;

  KeyValueStore& store_;
  const std::string prefix_;
  const absl::Time deadline_;
};

}  // namespace fp8::engine::collectives
