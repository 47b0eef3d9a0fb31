#include "worker/fp8_worker/log_forwarder.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "tests/worker/worker_test_util.h"

namespace fp8::worker {
namespace {

LogForwarder::Options Manual() {
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
      Manual());
  const RankKey key{"job-1", 1, 0};
  fw.Open(key, "c:1", "tok");
  for (int i = 0; i < 1250; ++i) fw.Append(key, absl::StrCat("line ", i), i);
  fw.FlushOnce();
  fw.FlushOnce();
  fw.FlushOnce();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].lines_size(), kMaxLinesPerAppend);
  EXPECT_EQ(sent[1].lines_size(), kMaxLinesPerAppend);
  EXPECT_EQ(sent[2].lines_size(), 250);
  EXPECT_EQ(sent[0].lines(0).text(), "line 0");
  EXPECT_EQ(sent[1].lines(0).text(), "line 500");
  EXPECT_EQ(sent[2].lines(249).text(), "line 1249");
  fw.FlushOnce();
  EXPECT_EQ(sent.size(), 3u);  // nothing new, no empty call
}

TEST(LogForwarder, FailedCallDropsItsLinesAndCarriesOn) {
  int calls = 0;
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest&) {
        ++calls;
        return absl::UnavailableError("down");
      },
      Manual());
  const RankKey key{"job-1", 1, 0};
  fw.Open(key, "c:1", "tok");
  fw.Append(key, "a", 1);
  fw.FlushOnce();
  fw.FlushOnce();  // the failed batch is not retried
  EXPECT_EQ(calls, 1);
  fw.Append(key, "b", 2);
  fw.FlushOnce();
  EXPECT_EQ(calls, 2);
}

TEST(LogForwarder, UnopenedRanksAndOverflowDropLines) {
  std::vector<v1::AppendLogsRequest> sent;
  LogForwarder::Options o = Manual();
  o.max_buffered_lines = 3;
  LogForwarder fw(
      [&](const std::string&, const std::string&, const v1::AppendLogsRequest& r) {
        sent.push_back(r);
        return absl::OkStatus();
      },
      o);
  fw.Append({"nobody", 1, 0}, "lost", 1);
  const RankKey key{"job-1", 1, 0};
  fw.Open(key, "c:1", "tok");
  for (int i = 0; i < 5; ++i) fw.Append(key, absl::StrCat(i), i);
  fw.FlushOnce();
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
  fw.Open(key, "c:1", "tok");
  fw.Append(key, "x", 1);
  fw.Append(key, "y", 2);
  EXPECT_TRUE(testing::WaitFor([&] { return lines.load() == 2; }));
}

}  // namespace
}  // namespace fp8::worker
