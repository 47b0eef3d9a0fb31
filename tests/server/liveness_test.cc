#include "server/scheduler/liveness.h"

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

namespace fp8::scheduler {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using WorkerIds = std::vector<std::string>;

const LivenessClock::time_point kT0 = LivenessClock::time_point{} + seconds(1000);

TEST(LostWorkers, BoundaryIsStrictlyMoreThanLostAfter) {
  const std::vector<WorkerHeartbeat> hb = {
      {"exact", kT0 - seconds(10)},                       // silent exactly 10s: alive
      {"over", kT0 - seconds(10) - milliseconds(1)},      // 1ms more: lost
      {"under", kT0 - seconds(10) + milliseconds(1)},     // 1ms less: alive
      {"fresh", kT0},                                     // just now: alive
      {"future", kT0 + seconds(5)},                       // stamped after now: alive
      {"ancient", kT0 - seconds(900)}};
  EXPECT_EQ(LostWorkers(hb, kT0, seconds(10)), (WorkerIds{"ancient", "over"}));
}

TEST(LostWorkers, EmptyAndAllAlive) {
  EXPECT_TRUE(LostWorkers({}, kT0, seconds(10)).empty());
  const std::vector<WorkerHeartbeat> hb = {{"a", kT0 - seconds(1)}, {"b", kT0}};
  EXPECT_TRUE(LostWorkers(hb, kT0, seconds(10)).empty());
}

TEST(LostWorkers, SortedByIdAndEachOnce) {
  const std::vector<WorkerHeartbeat> hb = {{"c", kT0 - seconds(60)},
                                           {"a", kT0 - seconds(60)},
                                           {"b", kT0 - seconds(60)},
                                           {"a", kT0 - seconds(70)}};
  EXPECT_EQ(LostWorkers(hb, kT0, seconds(10)), (WorkerIds{"a", "b", "c"}));
}

TEST(LostWorkers, LatestHeartbeatOfADuplicateWins) {
  const std::vector<WorkerHeartbeat> hb = {{"a", kT0 - seconds(60)}, {"a", kT0}};
  EXPECT_TRUE(LostWorkers(hb, kT0, seconds(10)).empty());
}

TEST(LostWorkers, ZeroWindowLosesAnythingOlderThanNow) {
  const std::vector<WorkerHeartbeat> hb = {{"now", kT0}, {"old", kT0 - milliseconds(1)}};
  EXPECT_EQ(LostWorkers(hb, kT0, LivenessClock::duration::zero()), (WorkerIds{"old"}));
}

TEST(DescribeFailure, SaysWhatAndWhere) {
  EXPECT_EQ(DescribeFailure(WorkerLost{"w2"}), "worker 'w2' lost (no heartbeat)");
  EXPECT_EQ(DescribeFailure(RankExited{1, "w2", 3}), "rank 1 on worker 'w2' exited with code 3");
  EXPECT_EQ(DescribeFailure(RankExited{0, "w1", -9}), "rank 0 on worker 'w1' killed by signal 9");
}

TEST(DecideAfterFailure, RestartsWhileBelowMaxRestarts) {
  const AttemptFailure lost = WorkerLost{"w2"};
  const AttemptDecision first = DecideAfterFailure(lost, 0, 2);
  ASSERT_TRUE(std::holds_alternative<Restart>(first));
  EXPECT_EQ(std::get<Restart>(first).restart_number, 1);
  EXPECT_EQ(std::get<Restart>(first).reason, "worker 'w2' lost (no heartbeat)");

  const AttemptDecision last = DecideAfterFailure(lost, 1, 2);
  ASSERT_TRUE(std::holds_alternative<Restart>(last));
  EXPECT_EQ(std::get<Restart>(last).restart_number, 2);
}

TEST(DecideAfterFailure, FailsAtTheBoundary) {
  const AttemptFailure exited = RankExited{1, "w2", 3};
  const AttemptDecision d = DecideAfterFailure(exited, 2, 2);
  ASSERT_TRUE(std::holds_alternative<Fail>(d));
  EXPECT_EQ(std::get<Fail>(d).reason,
            "rank 1 on worker 'w2' exited with code 3; no restarts left (2 of 2 used)");
  EXPECT_TRUE(std::holds_alternative<Fail>(DecideAfterFailure(exited, 5, 2)));
}

TEST(DecideAfterFailure, ZeroOrNegativeMaxRestartsFailsAtOnce) {
  const AttemptFailure lost = WorkerLost{"w1"};
  EXPECT_TRUE(std::holds_alternative<Fail>(DecideAfterFailure(lost, 0, 0)));
  const AttemptDecision d = DecideAfterFailure(lost, 0, -1);
  ASSERT_TRUE(std::holds_alternative<Fail>(d));
  EXPECT_EQ(std::get<Fail>(d).reason, "worker 'w1' lost (no heartbeat); no restarts left (0 of 0 used)");
}

}  // namespace
}  // namespace fp8::scheduler
