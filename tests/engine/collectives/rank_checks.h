// What a rank's body uses instead of gtest assertions (which would fail only inside the
// child): a list of complaints that becomes the rank's report, and a helper that joins a
// Gloo group over a FileStore.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine::collectives::test {

class RankChecks {
 public:
  // Records `what` unless `ok`; returns ok so callers can stop early.
  bool expect(bool ok, const std::string& what) {
    if (!ok) complain(what);
    return ok;
  }
  bool expect_ok(const absl::Status& status, const std::string& what) {
    if (!status.ok()) complain(absl::StrCat(what, ": ", status.ToString()));
    return status.ok();
  }
  void complain(const std::string& what) {
    if (++count_ <= kMaxComplaints) absl::StrAppend(&text_, text_.empty() ? "" : "\n  ", what);
  }
  const std::string& text() const { return text_; }

 private:
  static constexpr int kMaxComplaints = 20;  // the first few say enough
  int count_ = 0;
  std::string text_;
};

// A group of `world` ranks meeting in `store_dir` under a prefix of the test's own.
inline absl::StatusOr<std::unique_ptr<ProcessGroup>> join_group(const std::string& store_dir, int rank, int world,
                                                                absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::open(store_dir);
  if (!store.ok()) return store.status();
  ProcessGroupOptions options;
  options.prefix = "test-job/attempt-0/";
  options.timeout = timeout;
  return make_gloo_process_group(**store, rank, world, options);
}

}  // namespace fp8::engine::collectives::test
