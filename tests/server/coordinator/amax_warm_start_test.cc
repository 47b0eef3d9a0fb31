// fp8.amax_init_from: a job's first attempt starts delayed scaling from the amax histories
// the coordinator kept for an earlier job of the same owner and model, until it reports
// its own; a source that is missing, someone else's, another model's or without
// histories is refused at submit.
#include <gtest/gtest.h>

#include <string>

#include "tests/server/coordinator/coordinator_fixture.h"

namespace fp8::server {
namespace {

class AmaxWarmStartTest : public CoordinatorTest {
 protected:
  v1::JobSpec delayed_spec() {
    v1::JobSpec spec = make_spec(1);
    spec.mutable_fp8()->set_recipe(v1::Fp8Spec::DELAYED);
    return spec;
  }

  // One history of one cast at `step`, as rank 0 of `job` reports it.
  static void report(Coordinator& c, const RunningJob& job, int64_t step, float amax) {
    v1::ReportAmaxHistoriesRequest r;
    r.mutable_caller()->set_job_id(job.id);
    r.mutable_caller()->set_attempt(job.start.attempt());
    r.set_step(step);
    v1::AmaxHistory* h = r.add_histories();
    h->set_layer("layers.0.attention.wq");
    h->set_operand(v1::AmaxHistory::INPUT);
    h->add_history(amax);
    h->set_scale(448.0f / amax);
    ASSERT_TRUE(c.report_amax_histories(job.trainer, r).ok());
  }

  absl::StatusOr<v1::GetAmaxHistoriesResponse> histories_of(const RunningJob& job) {
    v1::GetAmaxHistoriesRequest get;
    get.mutable_caller()->set_job_id(job.id);
    get.mutable_caller()->set_attempt(job.start.attempt());
    return c_->get_amax_histories(job.trainer, get);
  }

  absl::Status submit_error(const Principal& who, const v1::JobSpec& spec) {
    v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    r.mutable_spec()->mutable_checkpoint()->set_dir((dir_ / "ckpt" / who.name / "tiny").string());
    return c_->submit(who, r).status();
  }
};

TEST_F(AmaxWarmStartTest, AFirstAttemptGetsTheSourceJobsHistoriesUntilItHasItsOwn) {
  const RunningJob source = start_running(delayed_spec());
  report(*c_, source, 12, 3.0f);

  v1::JobSpec warm = delayed_spec();
  warm.mutable_fp8()->set_amax_init_from(source.id);
  const RunningJob job = start_running(warm);
  auto got = histories_of(job);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->from_job_id(), source.id);
  EXPECT_EQ(got->step(), 12);
  ASSERT_EQ(got->histories_size(), 1);
  EXPECT_FLOAT_EQ(got->histories(0).history(0), 3.0f);

  // Once the job reports its own, those are what a restart resumes.
  report(*c_, job, 4, 5.0f);
  got = histories_of(job);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->from_job_id(), "");
  EXPECT_EQ(got->step(), 4);
  ASSERT_EQ(got->histories_size(), 1);
  EXPECT_FLOAT_EQ(got->histories(0).history(0), 5.0f);
}

TEST_F(AmaxWarmStartTest, ASourceThatCannotServeIsRefusedAtSubmit) {
  const RunningJob without_histories = start_running(delayed_spec());
  const RunningJob with_histories = start_running(delayed_spec());
  report(*c_, with_histories, 3, 2.0f);

  v1::JobSpec warm = delayed_spec();
  warm.mutable_fp8()->set_amax_init_from("job-999");
  absl::Status s = submit_error(alice_, warm);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("fp8.amax_init_from: no job 'job-999'"), std::string::npos) << s;

  warm.mutable_fp8()->set_amax_init_from(without_histories.id);
  s = submit_error(alice_, warm);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("has no amax histories"), std::string::npos) << s;

  // bob cannot start from alice's job: to him it does not exist.
  warm.mutable_fp8()->set_amax_init_from(with_histories.id);
  warm.set_owner("bob");
  s = submit_error(bob_, warm);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no job '" + with_histories.id + "'"), std::string::npos) << s;
  warm.clear_owner();

  v1::JobSpec wider = warm;
  wider.mutable_model()->set_dim(128);
  s = submit_error(alice_, wider);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("trains another model"), std::string::npos) << s;

  // Without delayed scaling there is nothing to start: the spec itself is refused.
  v1::JobSpec dynamic = warm;
  dynamic.mutable_fp8()->set_recipe(v1::Fp8Spec::TENSORWISE);
  s = submit_error(alice_, dynamic);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("fp8.amax_init_from"), std::string::npos) << s;

  // The one that can serve is accepted.
  EXPECT_TRUE(submit_error(alice_, warm).ok());
}

}  // namespace
}  // namespace fp8::server
