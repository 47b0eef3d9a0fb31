#include "server/scheduler/scheduler.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace fp8::scheduler {
namespace {

constexpr DeviceKind kCpu = DeviceKind::kCpu;
constexpr DeviceKind kCuda = DeviceKind::kCuda;

WorkerView worker(std::string id, int64_t seq, DeviceKind kind = kCpu, bool busy = false,
                  bool alive = true) {
  return WorkerView{std::move(id), kind, seq, busy, alive};
}

JobView job(std::string id, int priority, int64_t seq, int world_size,
            DeviceKind kind = kCpu) {
  return JobView{std::move(id), priority, seq, world_size, kind};
}

// The job ids placed, in placement order.
std::vector<std::string> ids(const std::vector<Placement>& ps) {
  std::vector<std::string> ids;
  for (const Placement& p : ps) ids.push_back(p.job_id);
  return ids;
}

// The worker ids of one placement, by rank.
std::vector<std::string> worker_ids(const Placement& p) {
  std::vector<std::string> ids;
  for (const RankSlot& s : p.ranks) ids.push_back(s.worker_id);
  return ids;
}

using IdList = std::vector<std::string>;

TEST(Schedule, NothingQueuedOrNoWorkers) {
  std::vector<WorkerView> workers = {worker("w1", 1)};
  EXPECT_TRUE(schedule({}, workers).placements.empty());
  std::vector<JobView> jobs = {job("a", 0, 1, 1)};
  EXPECT_TRUE(schedule(jobs, {}).placements.empty());
}

TEST(Schedule, HigherPriorityFirst) {
  std::vector<JobView> jobs = {job("low", 0, 1, 1), job("high", 5, 2, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1)};
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"high"}));
}

TEST(Schedule, SubmissionOrderWithinAPriority) {
  std::vector<JobView> jobs = {job("third", 1, 30, 1), job("first", 1, 10, 1),
                               job("second", 1, 20, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2)};
  const auto ps = schedule(jobs, workers).placements;
  EXPECT_EQ(ids(ps), (IdList{"first", "second"}));
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"w1"}));
  EXPECT_EQ(worker_ids(ps[1]), (IdList{"w2"}));
}

TEST(Schedule, NegativePrioritiesOrderToo) {
  std::vector<JobView> jobs = {job("neg", -3, 1, 1), job("zero", 0, 2, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1)};
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"zero"}));
}

TEST(Schedule, GangWaitsForThirdWorkerThenPlaces) {
  std::vector<JobView> jobs = {job("gang", 0, 1, 3)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2)};
  EXPECT_TRUE(schedule(jobs, workers).placements.empty());

  workers.push_back(worker("w3", 3));
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].job_id, "gang");
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"w1", "w2", "w3"}));
}

TEST(Schedule, NothingHeldPartially) {
  // The 3-rank job at the head does not fit on cpu; it reserves nothing, and the cuda
  // job that follows still gets both cuda workers.
  std::vector<JobView> jobs = {job("big", 9, 1, 3), job("gpu", 0, 2, 2, kCuda)};
  std::vector<WorkerView> workers = {worker("c1", 1), worker("c2", 2),
                                     worker("g1", 3, kCuda), worker("g2", 4, kCuda)};
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ids(ps), (IdList{"gpu"}));
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"g1", "g2"}));
  for (const Placement& p : ps) EXPECT_NE(p.job_id, "big");
}

TEST(Schedule, AJobTheWorkersCouldHoldHoldsThemBackFromLaterJobs) {
  // "big" needs 3 of the 3 alive workers, one busy; "small" would fit a free one but must
  // wait behind it so that big is not starved.
  std::vector<JobView> jobs = {job("big", 5, 1, 3), job("small", 0, 2, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("w3", 3, kCpu, /*busy=*/true)};
  const Plan plan = schedule(jobs, workers);
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(plan.waiting,
            (std::vector<Waiting>{{"big", Waiting::Reason::kWorkers, "waiting for 3 cpu workers: 3 registered, 2 free"},
                                  {"small", Waiting::Reason::kBehind, "behind big (priority 5)"}}));
  // Higher-ordered jobs placed before the waiting one are unaffected.
  jobs.push_back(job("first", 7, 0, 1));
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"first"}));
}

TEST(Schedule, AJobMoreWorkersMustJoinForHoldsNothingBack) {
  // Only 2 workers are alive: "big" cannot start before a third registers, so holding
  // them back would not bring its start closer. "small" runs meanwhile.
  std::vector<JobView> jobs = {job("big", 5, 1, 3), job("small", 0, 2, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("dead", 3, kCpu, false, /*alive=*/false)};
  const Plan plan = schedule(jobs, workers);
  EXPECT_EQ(ids(plan.placements), (IdList{"small"}));
  EXPECT_EQ(plan.waiting, (std::vector<Waiting>{{"big", Waiting::Reason::kWorkers,
                                                 "waiting for 3 cpu workers: 2 registered, 2 free; more must register"}}));
}

TEST(Schedule, LaterJobsMayTakeTheWorkersAWaitingJobCannotUse) {
  // "big" needs 4 cores a rank: only w3 and w4 (busy) offer them. It holds w3 back; the
  // 1-core job takes w1 and w2, which big could never use.
  JobView big = job("big", 5, 1, 2);
  big.cpus_per_rank = 4;
  std::vector<JobView> jobs = {big, job("small", 0, 2, 2), job("later", 0, 3, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("w3", 3), worker("w4", 4, kCpu, true)};
  workers[0].cpus = workers[1].cpus = 1;
  workers[2].cpus = workers[3].cpus = 8;
  const Plan plan = schedule(jobs, workers);
  ASSERT_EQ(ids(plan.placements), (IdList{"small"}));
  EXPECT_EQ(worker_ids(plan.placements[0]), (IdList{"w1", "w2"}));
  EXPECT_EQ(plan.waiting,
            (std::vector<Waiting>{
                {"big", Waiting::Reason::kWorkers, "waiting for 2 cpu workers offering 4 cpus: 2 registered, 1 free"},
                {"later", Waiting::Reason::kBehind, "behind big (priority 5)"}}));
}

TEST(Schedule, HeadOfLineDoesNotBlockTheOtherKind) {
  std::vector<JobView> jobs = {job("big-gpu", 5, 1, 4, kCuda), job("small-gpu", 4, 2, 1, kCuda),
                               job("cpu-job", 0, 3, 2, kCpu)};
  std::vector<WorkerView> workers = {worker("g1", 1, kCuda), worker("g2", 4, kCuda, true), worker("g3", 5, kCuda, true),
                                     worker("g4", 6, kCuda, true), worker("c1", 2), worker("c2", 3)};
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ids(ps), (IdList{"cpu-job"}));
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"c1", "c2"}));
}

TEST(Schedule, KindsDoNotMix) {
  std::vector<JobView> jobs = {job("gpu", 0, 1, 2, kCuda)};
  std::vector<WorkerView> workers = {worker("c1", 1), worker("c2", 2),
                                     worker("g1", 3, kCuda)};
  EXPECT_TRUE(schedule(jobs, workers).placements.empty());

  std::vector<JobView> cpu_jobs = {job("cpu", 0, 1, 1)};
  std::vector<WorkerView> gpu_only = {worker("g1", 1, kCuda), worker("g2", 2, kCuda)};
  EXPECT_TRUE(schedule(cpu_jobs, gpu_only).placements.empty());
}

TEST(Schedule, BusyAndDeadWorkersAreSkipped) {
  std::vector<JobView> jobs = {job("j", 0, 1, 2)};
  std::vector<WorkerView> workers = {
      worker("busy", 1, kCpu, /*busy=*/true), worker("dead", 2, kCpu, false, /*alive=*/false),
      worker("ok1", 3)};
  EXPECT_TRUE(schedule(jobs, workers).placements.empty());

  workers.push_back(worker("ok2", 4));
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"ok1", "ok2"}));
}

TEST(Schedule, RanksFollowRegistrationThenId) {
  std::vector<JobView> jobs = {job("j", 0, 1, 4)};
  // Given out of order; "a" and "b" share a registered_seq, so id breaks the tie.
  std::vector<WorkerView> workers = {worker("z", 1), worker("b", 7), worker("y", 3),
                                     worker("a", 7)};
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ps.size(), 1u);
  ASSERT_EQ(ps[0].ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ps[0].ranks[r].rank, r);
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"z", "y", "a", "b"}));
}

TEST(Schedule, DeterministicWhateverTheInputOrder) {
  std::vector<JobView> jobs = {job("a", 1, 1, 2), job("b", 1, 2, 1), job("c", 0, 3, 1, kCuda)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("w3", 3),
                                     worker("g1", 4, kCuda)};
  const auto expected = schedule(jobs, workers).placements;
  std::vector<JobView> jobs_rev(jobs.rbegin(), jobs.rend());
  std::vector<WorkerView> workers_rev(workers.rbegin(), workers.rend());
  EXPECT_EQ(schedule(jobs_rev, workers_rev).placements, expected);
  EXPECT_EQ(schedule(jobs, workers).placements, expected);
}

TEST(Schedule, SeveralJobsInOneCallUseDisjointWorkers) {
  std::vector<JobView> jobs = {job("a", 0, 1, 2), job("b", 0, 2, 1), job("c", 0, 3, 2),
                               job("g", 0, 4, 1, kCuda)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("w3", 3),
                                     worker("w4", 4), worker("w5", 5),
                                     worker("g1", 6, kCuda)};
  const auto ps = schedule(jobs, workers).placements;
  ASSERT_EQ(ids(ps), (IdList{"a", "b", "c", "g"}));
  EXPECT_EQ(worker_ids(ps[0]), (IdList{"w1", "w2"}));
  EXPECT_EQ(worker_ids(ps[1]), (IdList{"w3"}));
  EXPECT_EQ(worker_ids(ps[2]), (IdList{"w4", "w5"}));
  EXPECT_EQ(worker_ids(ps[3]), (IdList{"g1"}));
}

TEST(Schedule, WorkersRunOutMidQueueThenBlock) {
  // a takes 2 of 3; b (2 ranks) no longer fits and blocks c (1 rank) behind it.
  std::vector<JobView> jobs = {job("a", 0, 1, 2), job("b", 0, 2, 2), job("c", 0, 3, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w2", 2), worker("w3", 3)};
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"a"}));
}

TEST(Schedule, MalformedWorldSizeIsSkippedAndBlocksNothing) {
  std::vector<JobView> jobs = {job("zero", 9, 1, 0), job("neg", 8, 2, -1), job("ok", 0, 3, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1)};
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"ok"}));
}

TEST(Schedule, DuplicateWorkerIdUsedOnce) {
  std::vector<JobView> jobs = {job("a", 0, 1, 1), job("b", 0, 2, 1)};
  std::vector<WorkerView> workers = {worker("w1", 1), worker("w1", 2)};
  EXPECT_EQ(ids(schedule(jobs, workers).placements), (IdList{"a"}));
}

}  // namespace
}  // namespace fp8::scheduler
