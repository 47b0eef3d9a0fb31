#include "worker/fp8_worker/log_forwarder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tests/worker/worker_test_util.h"

namespace fp8::worker {
namespace {

LogForwarder::Options manual() {
  LogForwarder::Options o;
  o.background = false;
  return o;
}

TEST(LogForwarder, BatchesOfAtMostFiveHundredLinesInOrder) {
  std::vector<v1::AppendLogsRequest> sent;
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest& r) {
        sent.push_back(r);
        return absl::OkStatus();
      },
      manual());
  const RankKey key{"job-1", 1, 0};
  fw.open(key, "c:1", "tok");
  for (int i = 0; i < 1250; ++i) fw.append(key, absl::StrCat("line ", i), i);
  fw.flush_once();
  fw.flush_once();
  fw.flush_once();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].lines_size(), kMaxLinesPerAppend);
  EXPECT_EQ(sent[1].lines_size(), kMaxLinesPerAppend);
  EXPECT_EQ(sent[2].lines_size(), 250);
  EXPECT_EQ(sent[0].lines(0).text(), "line 0");
  EXPECT_EQ(sent[1].lines(0).text(), "line 500");
  EXPECT_EQ(sent[2].lines(249).text(), "line 1249");
  fw.flush_once();
  EXPECT_EQ(sent.size(), 3u);  // nothing new, no empty call
}

TEST(LogForwarder, FailedCallDropsItsLinesAndCarriesOn) {
  int calls = 0;
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest&) {
        ++calls;
        return absl::UnavailableError("down");
      },
      manual());
  const RankKey key{"job-1", 1, 0};
  fw.open(key, "c:1", "tok");
  fw.append(key, "a", 1);
  fw.flush_once();
  fw.flush_once();  // the failed batch is not retried
  EXPECT_EQ(calls, 1);
  fw.append(key, "b", 2);
  fw.flush_once();
  EXPECT_EQ(calls, 2);
}

TEST(LogForwarder, UnopenedRanksAndOverflowDropLines) {
  std::vector<v1::AppendLogsRequest> sent;
  LogForwarder::Options o = manual();
  o.max_buffered_lines = 3;
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest& r) {
        sent.push_back(r);
        return absl::OkStatus();
      },
      o);
  fw.append({"nobody", 1, 0}, "lost", 1);
  const RankKey key{"job-1", 1, 0};
  fw.open(key, "c:1", "tok");
  for (int i = 0; i < 5; ++i) fw.append(key, absl::StrCat(i), i);
  fw.flush_once();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].lines_size(), 3);
  EXPECT_EQ(sent[0].lines(0).text(), "2");  // the oldest went
}

TEST(LogForwarder, BackgroundThreadSends) {
  std::atomic<int> lines{0};
  LogForwarder::Options o;
  o.interval = absl::Milliseconds(20);
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest& r) {
        lines += r.lines_size();
        return absl::OkStatus();
      },
      o);
  const RankKey key{"job-1", 1, 0};
  fw.open(key, "c:1", "tok");
  fw.append(key, "x", 1);
  fw.append(key, "y", 2);
  EXPECT_TRUE(testing::wait_for([&] { return lines.load() == 2; }));
}

// A closed rank's lines go out at once, not at the next interval, and the rank counts as
// delivered only once the call carrying them has returned (its exit report waits for that).
TEST(LogForwarder, ClosingSendsAtOnceAndDeliveredWaitsForTheCall) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  LogForwarder::Options o;
  o.interval = absl::Hours(1);
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest&) {
        std::unique_lock<std::mutex> lock(mu);
        entered = true;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
        return absl::OkStatus();
      },
      o);
  const RankKey key{"job-1", 1, 0};
  fw.open(key, "c:1", "tok");
  fw.append(key, "last words", 1);
  EXPECT_FALSE(fw.delivered(key));
  fw.close(key);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; })) << "not sent on Close";
  }
  EXPECT_FALSE(fw.delivered(key)) << "the call is still in flight";
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(testing::wait_for([&] { return fw.delivered(key); }));
  EXPECT_TRUE(fw.delivered(RankKey{"job-2", 1, 0})) << "a rank never opened has nothing to deliver";
}

}  // namespace
}  // namespace fp8::worker
