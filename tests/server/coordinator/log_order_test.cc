// The order of a job's log lines: each carries a sequence that orders them as they were
// stored (times do not: a rank writes many lines in one millisecond and clocks differ), and
// GetJobLogs with after_sequence hands out the lines after a cursor, oldest first and
// bounded, so that a follower reads every line exactly once.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/coordinator/coordinator_fixture.h"

namespace fp8::server {
namespace {

class LogOrderTest : public CoordinatorTest {
 protected:
  // Appends `texts` as rank 0 of attempt 1, all at `time_ms`.
  void append(const RunningJob& job, const std::vector<std::string>& texts, int64_t time_ms) {
    v1::AppendLogsRequest append;
    append.mutable_caller()->set_job_id(job.id);
    append.mutable_caller()->set_attempt(1);
    for (const std::string& t : texts) {
      v1::LogLine* line = append.add_lines();
      line->set_text(t);
      line->set_time_unix_ms(time_ms);
    }
    ASSERT_TRUE(c_->append_logs(job.trainer, append).ok());
  }

  // The newest `tail` lines, or with `after` the oldest `tail` lines after it.
  v1::GetJobLogsResponse logs(const std::string& id, int tail, std::optional<int64_t> after = std::nullopt) {
    v1::GetJobLogsRequest req;
    req.set_job_id(id);
    req.set_tail_lines(tail);
    if (after.has_value()) req.set_after_sequence(*after);
    auto got = c_->get_job_logs(alice_, req);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : v1::GetJobLogsResponse();
  }

  static std::vector<std::string> texts(const v1::GetJobLogsResponse& r) {
    std::vector<std::string> out;
    for (const v1::JobLogLine& l : r.lines()) out.push_back(l.line().text());
    return out;
  }
};

TEST_F(LogOrderTest, SequencesOrderLinesThatShareAMillisecond) {
  const RunningJob job = start_running(make_spec(1));
  ASSERT_NO_FATAL_FAILURE(append(job, {"a", "b", "a", "c"}, 1000));
  ASSERT_NO_FATAL_FAILURE(append(job, {"d"}, 999));  // an earlier clock, a later line

  const v1::GetJobLogsResponse all = logs(job.id, 100);
  EXPECT_EQ(texts(all), (std::vector<std::string>{"a", "b", "a", "c", "d"}));
  EXPECT_FALSE(all.truncated());
  for (int i = 1; i < all.lines_size(); ++i) {
    EXPECT_GT(all.lines(i).sequence(), all.lines(i - 1).sequence()) << i;
  }
  const v1::GetJobLogsResponse last = logs(job.id, 1);
  ASSERT_EQ(last.lines_size(), 1);
  EXPECT_EQ(last.lines(0).line().text(), "d");
  EXPECT_EQ(last.lines(0).sequence(), all.lines(4).sequence());
  EXPECT_TRUE(last.truncated());

  // After a cursor: the oldest lines past it, `tail_lines` at a time, `truncated` while
  // more follow; the same millisecond's repeated text is not taken for a line seen.
  v1::GetJobLogsResponse next = logs(job.id, 2, all.lines(1).sequence());
  EXPECT_EQ(texts(next), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(next.truncated());
  next = logs(job.id, 2, next.lines(1).sequence());
  EXPECT_EQ(texts(next), (std::vector<std::string>{"d"}));
  EXPECT_FALSE(next.truncated());
  next = logs(job.id, 2, next.lines(0).sequence());
  EXPECT_TRUE(next.lines().empty());
  EXPECT_FALSE(next.truncated());

  v1::GetJobLogsRequest bad;
  bad.set_job_id(job.id);
  bad.set_after_sequence(-1);
  EXPECT_EQ(c_->get_job_logs(alice_, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LogOrderTest, AfterACursorTheAnswerStaysWithinAPageAndLosesNothing) {
  const RunningJob job = start_running(make_spec(1));
  std::vector<std::string> written;
  for (int i = 0; i < 600; ++i) written.push_back(absl::StrCat(i, " ", std::string(4000, 'x')));
  ASSERT_NO_FATAL_FAILURE(append(job, std::vector<std::string>(written.begin(), written.begin() + 300), 5));
  ASSERT_NO_FATAL_FAILURE(append(job, std::vector<std::string>(written.begin() + 300, written.end()), 5));
  // A follower from the start (after sequence 0): pages of at most 1 MiB, in order, every
  // line once.
  std::vector<std::string> read;
  int64_t cursor = 0;
  for (int pages = 0; pages < 10; ++pages) {
    const v1::GetJobLogsResponse page = logs(job.id, 10000, cursor);
    EXPECT_LE(page.ByteSizeLong(), size_t{1} << 20);
    for (const v1::JobLogLine& l : page.lines()) read.push_back(l.line().text());
    if (!page.truncated()) break;
    ASSERT_GT(page.lines_size(), 0);
    cursor = page.lines(page.lines_size() - 1).sequence();
  }
  EXPECT_EQ(read, written);
}

}  // namespace
}  // namespace fp8::server
