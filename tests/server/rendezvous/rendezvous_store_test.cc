// RendezvousStore without a server: set/get, blocking reads woken by another thread,
// multi-key waits, timeouts naming the missing keys, the proto's limits, and a deleted
// namespace aborting its waiters and every later call.
#include "server/rendezvous/rendezvous_store.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fp8::server {
namespace {

constexpr char kNs[] = "job-7/attempt-2/";

TEST(RendezvousStore, SetThenGet) {
  RendezvousStore store;
  const std::string id("\x01\x00\x7f\xff", 4);
  ASSERT_TRUE(store.set(kNs, "nccl_unique_id", id).ok());
  absl::StatusOr<std::string> got = store.get(kNs, "nccl_unique_id", absl::ZeroDuration());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, id);
  ASSERT_TRUE(store.set(kNs, "nccl_unique_id", "new").ok());  // overwrite
  EXPECT_EQ(*store.get(kNs, "nccl_unique_id", absl::ZeroDuration()), "new");
  EXPECT_EQ(store.key_count(kNs), 1u);
}

TEST(RendezvousStore, NamespacesAreSeparate) {
  RendezvousStore store;
  ASSERT_TRUE(store.set("job-7/attempt-1/", "addr", "old").ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.get(kNs, "addr", absl::ZeroDuration()).status()));
}

TEST(RendezvousStore, BlockingGetIsWokenBySetFromAnotherThread) {
  RendezvousStore store;
  absl::StatusOr<std::string> got;
  std::thread waiter([&] { got = store.get(kNs, "rank0_addr", absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(store.set(kNs, "rank0_addr", "127.0.0.1:29500").ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "127.0.0.1:29500");
}

TEST(RendezvousStore, WaitForSeveralKeys) {
  RendezvousStore store;
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = store.wait(kNs, {"rank/0", "rank/1", "rank/2"}, absl::Seconds(30)); });
  for (const char* k : {"rank/2", "rank/0", "rank/1"}) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(store.set(kNs, k, "here").ok());
  }
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(RendezvousStore, TimeoutsNameTheMissingKeys) {
  RendezvousStore store;
  ASSERT_TRUE(store.set(kNs, "rank/0", "x").ok());
  const absl::Status waited = store.wait(kNs, {"rank/0", "rank/1", "rank/2"}, absl::Milliseconds(20));
  ASSERT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_NE(waited.message().find("rank/1, rank/2"), std::string_view::npos) << waited;
  EXPECT_EQ(waited.message().find("rank/0"), std::string_view::npos) << waited;
  EXPECT_NE(waited.message().find(kNs), std::string_view::npos) << waited;

  const absl::Status got = store.get(kNs, "never_set", absl::Milliseconds(20)).status();
  ASSERT_TRUE(absl::IsDeadlineExceeded(got)) << got;
  EXPECT_NE(got.message().find("never_set"), std::string_view::npos) << got;
}

TEST(RendezvousStore, LimitsOfTheProto) {
  RendezvousStore store;
  auto invalid = [](const absl::Status& s, std::string_view field) {
    return absl::IsInvalidArgument(s) && std::string(s.message()).rfind(std::string(field), 0) == 0;
  };
  EXPECT_TRUE(invalid(store.set("", "k", "v"), "rendezvous_namespace: empty"));
  EXPECT_TRUE(store.set(std::string(128, 'n'), "k", "v").ok());
  EXPECT_TRUE(invalid(store.set(std::string(129, 'n'), "k", "v"), "rendezvous_namespace: longer than 128"));
  EXPECT_TRUE(invalid(store.set(kNs, "", "v"), "key: empty"));
  EXPECT_TRUE(store.set(kNs, std::string(256, 'k'), "v").ok());
  EXPECT_TRUE(invalid(store.set(kNs, std::string(257, 'k'), "v"), "key: longer than 256 bytes"));
  EXPECT_TRUE(store.set(kNs, "big", std::string(1 << 20, 'v')).ok());
  EXPECT_TRUE(invalid(store.set(kNs, "big", std::string((1 << 20) + 1, 'v')), "value: longer than 1048576"));
  EXPECT_TRUE(invalid(store.get(kNs, "k", absl::Milliseconds(-1)).status(), "timeout_ms"));
  EXPECT_TRUE(invalid(store.get(kNs, "k", absl::Milliseconds(600'001)).status(), "timeout_ms"));
  EXPECT_TRUE(invalid(store.wait(kNs, {}, absl::ZeroDuration()), "keys: empty"));
  EXPECT_TRUE(invalid(store.wait(kNs, std::vector<std::string>(4097, "k"), absl::ZeroDuration()), "keys: 4097"));
  EXPECT_TRUE(invalid(store.wait(kNs, {"a", ""}, absl::ZeroDuration()), "keys[1]: empty"));

  const std::string full = "job-8/attempt-1/";
  for (int i = 0; i < 4096; ++i) ASSERT_TRUE(store.set(full, absl::StrCat("k", i), "").ok()) << i;
  const absl::Status over = store.set(full, "one-too-many", "");
  EXPECT_TRUE(absl::IsResourceExhausted(over)) << over;
  EXPECT_TRUE(store.set(full, "k7", "overwrite is fine").ok());
}

TEST(RendezvousStore, DeleteNamespaceAbortsWaitersAndLaterCalls) {
  RendezvousStore store;
  ASSERT_TRUE(store.set(kNs, "rank/0", "x").ok());
  absl::Status waited = absl::UnknownError("not run");
  absl::Status got = absl::UnknownError("not run");
  std::thread w1([&] { waited = store.wait(kNs, {"rank/0", "rank/1"}, absl::Seconds(600)); });
  std::thread w2([&] { got = store.get(kNs, "rank/1", absl::Seconds(600)).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time deleted = absl::Now();
  store.delete_namespace(kNs);
  w1.join();
  w2.join();
  EXPECT_LT(absl::Now() - deleted, absl::Seconds(60)) << "waiters must not run to their timeout";
  for (const absl::Status& s : {waited, got}) {
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_NE(s.message().find("rendezvous namespace job-7/attempt-2/ was closed: its attempt ended"),
              std::string_view::npos)
        << s;
  }
  EXPECT_EQ(store.key_count(kNs), 0u);
  EXPECT_TRUE(absl::IsAborted(store.set(kNs, "rank/0", "again")));
  EXPECT_TRUE(absl::IsAborted(store.get(kNs, "rank/0", absl::Seconds(1)).status()));
  EXPECT_TRUE(absl::IsAborted(store.wait(kNs, {"rank/0"}, absl::Seconds(1))));
  EXPECT_TRUE(store.set("job-7/attempt-3/", "rank/0", "next attempt").ok());
}

TEST(RendezvousStore, ShutdownWakesWaitersWithUnavailable) {
  RendezvousStore store;
  absl::Status got = absl::UnknownError("not run");
  std::thread waiter([&] { got = store.get(kNs, "k", absl::Seconds(600)).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  store.shutdown();
  waiter.join();
  EXPECT_TRUE(absl::IsUnavailable(got)) << got;
  EXPECT_TRUE(absl::IsUnavailable(store.set(kNs, "k", "v")));
}

TEST(RendezvousStore, CancelledCallerStopsWaiting) {
  RendezvousStore store;
  std::atomic<bool> cancel{false};
  absl::Status got = absl::UnknownError("not run");
  std::thread waiter([&] { got = store.get(kNs, "k", absl::Seconds(600), [&] { return cancel.load(); }).status(); });
  absl::SleepFor(absl::Milliseconds(20));
  cancel = true;
  waiter.join();
  EXPECT_TRUE(absl::IsCancelled(got)) << got;
}

}  // namespace
}  // namespace fp8::server
