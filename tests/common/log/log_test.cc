// The product's log: both formats, levels, ranks, and reading a json line back.
#include "common/log/log.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace fp8::log {
namespace {

std::vector<std::string> lines_of(const std::ostringstream& out) {
  return absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
}

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { install({}); }  // back to stderr for the other tests
  std::ostringstream out_;
};

TEST_F(LogTest, TextLinesCarryTimeLevelComponentAndMessage) {
  install({.component = "fp8-worker", .sink = &out_});
  info("registered with 127.0.0.1:7070 as w-1");
  warn("coordinator unreachable");
  error("cannot start");
  const std::vector<std::string> lines = lines_of(out_);
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  // YYYY-MM-DDThh:mm:ss.sssZ INFO fp8-worker: ...
  const std::vector<std::string> first = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  ASSERT_EQ(first.size(), 3u);
  absl::Time t;
  std::string err;
  ASSERT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E3SZ", first[0], absl::UTCTimeZone(), &t, &err)) << first[0] << err;
  EXPECT_LT(absl::AbsDuration(absl::Now() - t), absl::Minutes(1));
  EXPECT_EQ(first[1], "INFO");
  EXPECT_EQ(first[2], "fp8-worker: registered with 127.0.0.1:7070 as w-1");
  EXPECT_NE(lines[1].find(" WARNING fp8-worker: coordinator unreachable"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(" ERROR fp8-worker: cannot start"), std::string::npos) << lines[2];
}

TEST_F(LogTest, EachJsonLineIsOneObjectWithTimeLevelComponentAndMessage) {
  install({.component = "fp8-coordinator", .format = Format::kJson, .sink = &out_});
  info("serving on 127.0.0.1:7070");
  warn("a \"quoted\"\nmessage\twith control characters");
  error("not utf-8: \xff\xfe");
  const std::vector<std::string> lines = lines_of(out_);
  ASSERT_EQ(lines.size(), 3u) << "a newline in a message stays inside its one line:\n" << out_.str();
  const std::vector<std::string> levels = {"info", "warning", "error"};
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << lines[i];
    EXPECT_EQ(j.size(), 4u) << lines[i];
    EXPECT_EQ(j.value("level", ""), levels[i]);
    EXPECT_EQ(j.value("component", ""), "fp8-coordinator");
    EXPECT_TRUE(j.at("time").is_string());
    EXPECT_TRUE(j.at("message").is_string());
  }
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("message"), "a \"quoted\"\nmessage\twith control characters");
}

TEST_F(LogTest, LinesBelowTheLevelAreDropped) {
  install({.component = "c", .min_level = Level::kWarning, .sink = &out_});
  debug("d");
  info("i");
  warn("w");
  EXPECT_EQ(lines_of(out_).size(), 1u) << out_.str();
}

TEST_F(LogTest, ATrainersLineNamesItsRankAndReadsBack) {
  install({.component = "fp8-train", .format = Format::kText, .rank = 3, .sink = &out_});
  info("step 1/10");
  EXPECT_NE(out_.str().find(" INFO fp8-train[rank 3]: step 1/10\n"), std::string::npos) << out_.str();

  std::ostringstream json;
  install({.component = "fp8-train", .format = Format::kJson, .rank = 3, .sink = &json});
  const absl::Time before = absl::Now();
  warn("checkpoint step 10 is damaged");
  const std::vector<std::string> lines = lines_of(json);
  ASSERT_EQ(lines.size(), 1u);
  std::optional<Record> r = read_json_line(lines[0]);
  ASSERT_TRUE(r.has_value()) << lines[0];
  EXPECT_EQ(r->level, Level::kWarning);
  EXPECT_EQ(r->component, "fp8-train");
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->message, "checkpoint step 10 is damaged");
  EXPECT_GE(r->time_unix_ms, absl::ToUnixMillis(before) - 1);
  EXPECT_LE(r->time_unix_ms, absl::ToUnixMillis(absl::Now()));
}

TEST(ReadJsonLine, OtherLinesAreNotRecords) {
  for (const char* line : {"", "step 1/10", "{", "[]", R"({"time":"x","level":"info","component":"c","message":"m"})",
                           R"({"time":"2026-01-02T03:04:05.678Z","level":"loud","component":"c","message":"m"})",
                           R"({"time":"2026-01-02T03:04:05.678Z","level":"info","component":"c"})",
                           R"({"time":"2026-01-02T03:04:05.678Z","level":"info","component":"c","message":7})",
                           R"({"time":"2026-01-02T03:04:05.678Z","level":"info","component":"c","message":"m","rank":"one"})"}) {
    EXPECT_FALSE(read_json_line(line).has_value()) << line;
  }
}

TEST(ParseNames, AcceptWhatTheFlagsDocumentAndNameItOtherwise) {
  EXPECT_EQ(*parse_format("json"), Format::kJson);
  EXPECT_EQ(*parse_level("warning"), Level::kWarning);
  EXPECT_EQ(parse_format("xml").status().message(), "log format \"xml\": expected text or json");
  EXPECT_EQ(parse_level("warn").status().message(), "log level \"warn\": expected debug, info, warning or error");
}

}  // namespace
}  // namespace fp8::log
