// FSDP's communication thread (worker/engine/fsdp/comm_stream.h) over a real Gloo group of
// one rank: jobs run in the order queued, on one thread other than the caller's; the
// counters add up (bytes when queued, seconds when run or waited for); after a failure
// every later job fails with the first error without running; the destructor runs what
// is still queued. A job waits for the compute queued before it; on a device-queued group
// (NCCL's queued mode, here a recording stand-in over Gloo, since no GPU runs in CI) it
// runs in a batch on the caller's thread and orders the compute at wait().
#include "worker/engine/fsdp/comm_stream.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/engine/collectives/scratch_dir.h"
#include "tests/kernels/forwarding_backend.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"

namespace fp8::engine::fsdp {
namespace {

using collectives::ProcessGroup;
using std::chrono::milliseconds;

class CommStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    absl::StatusOr<std::unique_ptr<collectives::FileStore>> store = collectives::FileStore::open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    collectives::ProcessGroupOptions options;
    options.prefix = "comm-stream-test/";
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group = collectives::make_gloo_process_group(*store_, 0, 1, options);
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = std::move(*group);
  }

  ProcessGroup& group() { return *group_; }

  collectives::test::ScratchDir dir_;
  std::unique_ptr<collectives::FileStore> store_;
  std::unique_ptr<ProcessGroup> group_;
};

// A gate the test opens to let a job finish: jobs queue up behind it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST_F(CommStreamTest, JobsRunInTheOrderQueuedOnOneOtherThread) {
  CommStream stream(group(), cpu_backend());
  EXPECT_EQ(&stream.group(), &group());
  Gate gate;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::vector<CommStream::Handle> handles;
  constexpr int kJobs = 40;
  for (int i = 0; i < kJobs; ++i) {
    handles.push_back(stream.enqueue("job " + std::to_string(i), {}, [&, i](ProcessGroup& g) {
      if (i == 0) gate.pass();  // everything else queues behind the first job
      EXPECT_EQ(&g, &group());
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return absl::OkStatus();
    }));
    EXPECT_TRUE(handles.back().valid());
  }
  gate.open();
  // Waiting out of order changes nothing: each wait returns once its own job has run.
  for (int i = kJobs - 1; i >= 0; --i) EXPECT_TRUE(stream.wait(handles[static_cast<size_t>(i)]).ok()) << i;
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), static_cast<size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (const std::thread::id& t : threads) {
    EXPECT_EQ(t, threads[0]) << "every job runs on the one communication thread";
    EXPECT_NE(t, std::this_thread::get_id());
  }
}

TEST_F(CommStreamTest, JobsDriveTheGroupsCollectives) {
  CommStream stream(group(), cpu_backend());
  std::vector<float> data = {1.5f, -2.0f, 3.0f};
  std::vector<uint8_t> shard = {1, 2, 3}, gathered(3, 0);
  const absl::Status st = stream.run("collectives", {}, [&](ProcessGroup& g) {
    EXPECT_EQ(g.rank(), 0);
    EXPECT_EQ(g.size(), 1);
    if (absl::Status s = g.all_reduce(data.data(), 3, collectives::ReduceOp::kSum); !s.ok()) return s;
    if (absl::Status s = g.all_gather(shard.data(), gathered.data(), shard.size()); !s.ok()) return s;
    return g.barrier();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));  // one rank: the sum is itself
  EXPECT_EQ(gathered, shard);
}

TEST_F(CommStreamTest, RunAndWaitReturnTheJobsStatusOnEveryHandleCopy) {
  CommStream stream(group(), cpu_backend());
  EXPECT_TRUE(stream.run("ok", {}, [](ProcessGroup&) { return absl::OkStatus(); }).ok());
  const CommStream::Handle h = stream.enqueue("ok again", {}, [](ProcessGroup&) { return absl::OkStatus(); });
  const CommStream::Handle copy = h;
  EXPECT_TRUE(stream.wait(h).ok());
  EXPECT_TRUE(stream.wait(copy).ok());
  EXPECT_TRUE(stream.wait(h).ok()) << "waiting twice is fine";
}

TEST_F(CommStreamTest, WaitingOnAnEmptyHandleIsAnError) {
  CommStream stream(group(), cpu_backend());
  const CommStream::Handle empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(stream.wait(empty).code(), absl::StatusCode::kInternal);
}

CommCounters some_counts(int64_t k) {
  CommCounters c;
  c.all_gather_bytes_fp8 = 1 * k;
  c.all_gather_bytes_bf16 = 2 * k;
  c.all_gather_bytes_f32 = 3 * k;
  c.reduce_scatter_bytes_f32 = 4 * k;
  c.reduce_scatter_bytes_bf16 = 8 * k;
  c.all_reduces = 5 * k;
  c.weight_scale_all_reduces = 6 * k;
  c.amax_all_reduces = 7 * k;
  return c;
}

void expect_counts(const CommCounters& got, int64_t k) {
  EXPECT_EQ(got.all_gather_bytes_fp8, 1 * k);
  EXPECT_EQ(got.all_gather_bytes_bf16, 2 * k);
  EXPECT_EQ(got.all_gather_bytes_f32, 3 * k);
  EXPECT_EQ(got.all_gather_bytes(), 6 * k);
  EXPECT_EQ(got.reduce_scatter_bytes_f32, 4 * k);
  EXPECT_EQ(got.reduce_scatter_bytes_bf16, 8 * k);
  EXPECT_EQ(got.reduce_scatter_bytes(), 12 * k);
  EXPECT_EQ(got.all_reduces, 5 * k);
  EXPECT_EQ(got.weight_scale_all_reduces, 6 * k);
  EXPECT_EQ(got.amax_all_reduces, 7 * k);
}

TEST_F(CommStreamTest, CountsAreAddedWhenQueuedAndAccumulate) {
  CommStream stream(group(), cpu_backend());
  const CommCounters zero = stream.counters();
  expect_counts(zero, 0);
  EXPECT_EQ(zero.comm_seconds, 0.0);
  EXPECT_EQ(zero.exposed_seconds, 0.0);

  Gate gate;
  const CommStream::Handle blocked = stream.enqueue("blocked", some_counts(1), [&](ProcessGroup&) {
    gate.pass();
    return absl::OkStatus();
  });
  // The job has not run, but its bytes are already counted.
  expect_counts(stream.counters(), 1);
  const CommStream::Handle second = stream.enqueue("second", some_counts(2), [](ProcessGroup&) {
    return absl::OkStatus();
  });
  expect_counts(stream.counters(), 3);
  gate.open();
  ASSERT_TRUE(stream.wait(blocked).ok());
  ASSERT_TRUE(stream.wait(second).ok());
  ASSERT_TRUE(stream.run("third", some_counts(10), [](ProcessGroup&) { return absl::OkStatus(); }).ok());
  expect_counts(stream.counters(), 13);
  // A step's share is the difference of two snapshots.
  const CommCounters before = stream.counters();
  ASSERT_TRUE(stream.run("fourth", some_counts(5), [](ProcessGroup&) { return absl::OkStatus(); }).ok());
  const CommCounters delta = stream.counters() - before;
  expect_counts(delta, 5);
  EXPECT_GE(delta.comm_seconds, 0.0);
  EXPECT_GE(delta.exposed_seconds, 0.0);
}

TEST_F(CommStreamTest, CommSecondsCountTheJobsRunningTime) {
  CommStream stream(group(), cpu_backend());
  const CommCounters before = stream.counters();
  ASSERT_TRUE(stream.run("sleep", {}, [](ProcessGroup&) {
                      std::this_thread::sleep_for(milliseconds(60));
                      return absl::OkStatus();
                    }).ok());
  ASSERT_TRUE(stream.run("sleep again", {}, [](ProcessGroup&) {
                      std::this_thread::sleep_for(milliseconds(40));
                      return absl::OkStatus();
                    }).ok());
  const CommCounters d = stream.counters() - before;
  EXPECT_GE(d.comm_seconds, 0.095);
  EXPECT_LT(d.comm_seconds, 30.0);
  // Waiting right away for sleeping jobs exposes (nearly) all of their time; the bound
  // leaves room for the test thread being descheduled between enqueue and wait.
  EXPECT_GE(d.exposed_seconds, 0.05);
  EXPECT_LE(d.exposed_seconds, d.comm_seconds + 1.0);
  // Failing jobs count their time too.
  const CommCounters before_fail = stream.counters();
  EXPECT_FALSE(stream.run("fail slowly", {}, [](ProcessGroup&) {
                       std::this_thread::sleep_for(milliseconds(30));
                       return absl::InternalError("boom");
                     }).ok());
  EXPECT_GE((stream.counters() - before_fail).comm_seconds, 0.025);
}

TEST_F(CommStreamTest, CommunicationHiddenBehindComputeIsNotExposed) {
  CommStream stream(group(), cpu_backend());
  std::atomic<bool> ran{false};
  const CommCounters before = stream.counters();
  const CommStream::Handle h = stream.enqueue("short", {}, [&](ProcessGroup&) {
    std::this_thread::sleep_for(milliseconds(100));
    ran = true;
    return absl::OkStatus();
  });
  // "Compute" for much longer than the job takes, then wait: nothing left to wait for.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::this_thread::sleep_for(milliseconds(150));
  while (!ran && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(ran);
  std::this_thread::sleep_for(milliseconds(20));  // let the thread mark it done
  ASSERT_TRUE(stream.wait(h).ok());
  const CommCounters d = stream.counters() - before;
  EXPECT_GE(d.comm_seconds, 0.095);
  EXPECT_LT(d.exposed_seconds, 0.05) << "the job had finished before the wait";
}

TEST_F(CommStreamTest, AfterAFailureLaterJobsFailWithTheFirstErrorWithoutRunning) {
  CommStream stream(group(), cpu_backend());
  Gate gate;
  std::atomic<int> ran_after_failure{0};
  std::atomic<bool> first_ran{false};
  const CommStream::Handle ok = stream.enqueue("gather layers.0", {}, [&](ProcessGroup&) {
    gate.pass();
    first_ran = true;
    return absl::OkStatus();
  });
  const CommStream::Handle bad = stream.enqueue("gather layers.1", {}, [](ProcessGroup&) {
    return absl::UnavailableError("all_gather: lost rank 2 (connection closed)");
  });
  std::vector<CommStream::Handle> later;
  for (int i = 0; i < 5; ++i) {
    later.push_back(stream.enqueue("reduce_scatter layers." + std::to_string(i), {}, [&](ProcessGroup&) {
      ++ran_after_failure;
      return absl::OkStatus();
    }));
  }
  gate.open();
  EXPECT_TRUE(stream.wait(ok).ok());
  EXPECT_TRUE(first_ran);
  const absl::Status failed = stream.wait(bad);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(), "gather layers.1: all_gather: lost rank 2 (connection closed)");
  for (const CommStream::Handle& h : later) {
    const absl::Status s = stream.wait(h);
    EXPECT_EQ(s, failed) << "a job queued behind the failure";
  }
  // Jobs queued after the failure was seen fail the same way, even ones that would fail
  // differently themselves.
  EXPECT_EQ(stream.run("gather layers.9", {}, [&](ProcessGroup&) {
    ++ran_after_failure;
    return absl::OkStatus();
  }),
            failed);
  EXPECT_EQ(stream.run("another failure", {}, [&](ProcessGroup&) {
    ++ran_after_failure;
    return absl::InternalError("second error");
  }),
            failed);
  EXPECT_EQ(ran_after_failure.load(), 0);
}

TEST_F(CommStreamTest, WhatAJobCapturedIsReleasedBeforeItsWaiterWakes) {
  CommStream stream(group(), cpu_backend());
  auto tensor = std::make_shared<std::vector<float>>(1000, 1.0f);
  const CommStream::Handle h = stream.enqueue("keeps a tensor alive", {}, [tensor](ProcessGroup&) {
    return tensor->size() == 1000 ? absl::OkStatus() : absl::InternalError("?");
  });
  ASSERT_TRUE(stream.wait(h).ok());
  EXPECT_EQ(tensor.use_count(), 1) << "the finished job still holds its capture";

  // Also for jobs that never run because an earlier one failed.
  ASSERT_FALSE(stream.run("fail", {}, [](ProcessGroup&) { return absl::AbortedError("x"); }).ok());
  const CommStream::Handle skipped =
      stream.enqueue("skipped", {}, [tensor](ProcessGroup&) { return absl::OkStatus(); });
  ASSERT_FALSE(stream.wait(skipped).ok());
  EXPECT_EQ(tensor.use_count(), 1) << "the skipped job still holds its capture";
}

TEST_F(CommStreamTest, DestructorRunsQueuedJobsBeforeJoining) {
  std::atomic<int> ran{0};
  std::vector<int> order;
  std::mutex mu;
  {
    CommStream stream(group(), cpu_backend());
    for (int i = 0; i < 10; ++i) {
      stream.enqueue("job " + std::to_string(i), some_counts(1), [&, i](ProcessGroup&) {
        std::this_thread::sleep_for(milliseconds(5));
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
        ++ran;
        return absl::OkStatus();
      });
    }
    // Nothing waited for: the destructor must still run all ten.
  }
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST_F(CommStreamTest, DestructorAfterAFailureSkipsTheRestAndReturns) {
  std::atomic<int> ran{0};
  {
    CommStream stream(group(), cpu_backend());
    stream.enqueue("fail", {}, [](ProcessGroup&) { return absl::UnavailableError("peer gone"); });
    for (int i = 0; i < 5; ++i) {
      stream.enqueue("after", {}, [&](ProcessGroup&) {
        ++ran;
        return absl::OkStatus();
      });
    }
  }
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(CommStreamTest, AnIdleStreamIsDestroyedPromptly) {
  const auto start = std::chrono::steady_clock::now();
  { CommStream stream(group(), cpu_backend()); }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Several compute-side threads may wait on the same job (FSDP waits from one, but the
// handle is copyable): all wake with its status.
TEST_F(CommStreamTest, SeveralWaitersOnOneJobAllWake) {
  CommStream stream(group(), cpu_backend());
  Gate gate;
  const CommStream::Handle h = stream.enqueue("slow", {}, [&](ProcessGroup&) {
    gate.pass();
    return absl::DataLossError("checksum");
  });
  std::vector<absl::Status> got(4);
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < got.size(); ++i) {
    waiters.emplace_back([&, i, copy = h] { got[i] = stream.wait(copy); });
  }
  std::this_thread::sleep_for(milliseconds(20));
  gate.open();
  for (std::thread& t : waiters) t.join();
  for (const absl::Status& s : got) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(s.message(), "slow: checksum");
  }
}

// ---- ordering behind the compute ----------------------------------------------------------------

// The CPU backend with a fence that passes only once the test opens its gate: compute
// "still running" when a job is queued behind it.
class GatedBackend final : public fp8::testing::ForwardingBackend {
 public:
  explicit GatedBackend(Gate& gate) : ForwardingBackend(cpu_backend()), gate_(gate) {}
  absl::StatusOr<std::unique_ptr<Fence>> fence() override { return std::make_unique<GatedFence>(gate_); }

 private:
  class GatedFence final : public Fence {
   public:
    explicit GatedFence(Gate& gate) : gate_(gate) {}
    absl::Status wait() override {
      gate_.pass();
      return absl::OkStatus();
    }

   private:
    Gate& gate_;
  };
  Gate& gate_;
};

// On a host group a job runs only once the compute queued before it is done, and the
// thread that queued it is not held up meanwhile.
TEST_F(CommStreamTest, AHostJobStartsOnlyAfterTheComputeQueuedBeforeIt) {
  Gate compute_done;
  GatedBackend backend(compute_done);
  CommStream stream(group(), backend);
  EXPECT_FALSE(stream.queued_on_device());
  std::atomic<bool> ran{false};
  const CommStream::Handle h = stream.enqueue("after compute", {}, [&](ProcessGroup&) {
    ran = true;
    return absl::OkStatus();
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(ran.load()) << "the job ran before the compute queued before it was done";
  compute_done.open();
  ASSERT_TRUE(stream.wait(h).ok());
  EXPECT_TRUE(ran.load());
}

// A device-queued group (NCCL's queued mode) as CommStream sees it, over the real Gloo
// group: its collectives run when called (host memory), and it records the batches.
class RecordingQueuedGroup final : public ProcessGroup, public collectives::QueuedCollectives {
 public:
  explicit RecordingQueuedGroup(ProcessGroup& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend_name() const override { return "recording"; }
  absl::Status all_gather(const void* s, void* r, size_t n) override { return call(inner_.all_gather(s, r, n)); }
  absl::Status reduce_scatter(const float* s, float* r, int64_t n, collectives::ReduceOp op) override {
    return call(inner_.reduce_scatter(s, r, n, op));
  }
  absl::Status all_reduce(float* d, int64_t n, collectives::ReduceOp op) override { return call(inner_.all_reduce(d, n, op)); }
  absl::Status all_reduce(double* d, int64_t n, collectives::ReduceOp op) override {
    return call(inner_.all_reduce(d, n, op));
  }
  absl::Status broadcast(void* d, size_t n, int root) override { return call(inner_.broadcast(d, n, root)); }
  absl::Status barrier() override { return call(inner_.barrier()); }
  QueuedCollectives* queued() override { return this; }

  absl::Status open() override {
    events.push_back("open");
    open_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> close(const char* what) override {
    events.push_back(absl::StrCat("close ", what));
    open_ = false;
    return next_ticket_++;
  }
  absl::Status order_after(int64_t ticket) override {
    events.push_back(absl::StrCat("order_after ", ticket));
    return health_;
  }
  absl::Status health() override { return health_; }
  Times take_times() override { return Times{0.5, 0.25}; }

  std::vector<std::string> events;
  absl::Status health_;  // what the watchdog found

 private:
  absl::Status call(absl::Status s) {
    events.push_back(open_ ? "collective" : "collective outside a batch");
    return s;
  }
  ProcessGroup& inner_;
  bool open_ = false;
  int64_t next_ticket_ = 0;
};

// A device-queued group: each job runs at once on the caller's thread inside a batch; the
// compute is ordered after it only at wait(), and what the job captured (its buffers) is
// kept until then; the device's times come from the group.
TEST_F(CommStreamTest, ADeviceQueuedJobRunsInABatchAndOrdersTheComputeAtWait) {
  RecordingQueuedGroup queued(group());
  CommStream stream(queued, cpu_backend());
  EXPECT_TRUE(stream.queued_on_device());
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  auto buffer = std::make_shared<std::vector<float>>(4, 2.0f);
  const CommStream::Handle h = stream.enqueue("all_reduce of a buffer", some_counts(1), [&, buffer](ProcessGroup& g) {
    ran_on = std::this_thread::get_id();
    return g.all_reduce(buffer->data(), 4, collectives::ReduceOp::kSum);
  });
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(queued.events, (std::vector<std::string>{"open", "collective", "close all_reduce of a buffer"}));
  EXPECT_EQ(buffer.use_count(), 2) << "the job let go of its buffer before the compute was ordered after it";
  ASSERT_TRUE(stream.wait(h).ok());
  EXPECT_EQ(queued.events.back(), "order_after 0");
  EXPECT_EQ(buffer.use_count(), 1);
  ASSERT_TRUE(stream.wait(h).ok());  // a second wait orders nothing again
  EXPECT_EQ(queued.events.size(), 4u);
  const CommCounters c = stream.counters();
  EXPECT_EQ(c.all_reduces, some_counts(1).all_reduces);  // counted when queued, as on host groups
  EXPECT_DOUBLE_EQ(c.comm_seconds, 0.5);
  EXPECT_DOUBLE_EQ(c.exposed_seconds, 0.25);
}

// What the group's watchdog found reaches the waiter, health() and every later job, which
// then does not run.
TEST_F(CommStreamTest, ADeviceQueuedGroupsFailureStopsLaterJobs) {
  RecordingQueuedGroup queued(group());
  CommStream stream(queued, cpu_backend());
  const CommStream::Handle h = stream.enqueue("gather layers.0", {}, [](ProcessGroup&) { return absl::OkStatus(); });
  queued.health_ = absl::DeadlineExceededError("nccl all_gather of layers.0: not done within 10 s");
  const absl::Status waited = stream.wait(h);
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ(stream.health().code(), absl::StatusCode::kDeadlineExceeded);
  bool ran = false;
  const absl::Status later = stream.run("gather layers.1", {}, [&](ProcessGroup&) {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_EQ(later.code(), absl::StatusCode::kDeadlineExceeded) << later;
  EXPECT_FALSE(ran);
}

// Jobs never waited for are ordered and released when the stream goes.
TEST_F(CommStreamTest, ADeviceQueuedStreamOrdersWhatIsLeftWhenDestroyed) {
  RecordingQueuedGroup queued(group());
  auto buffer = std::make_shared<int>(0);
  {
    CommStream stream(queued, cpu_backend());
    stream.enqueue("never waited for", {}, [buffer](ProcessGroup&) { return absl::OkStatus(); });
  }
  EXPECT_EQ(queued.events.back(), "order_after 0");
  EXPECT_EQ(buffer.use_count(), 1);
}

}  // namespace
}  // namespace fp8::engine::fsdp
