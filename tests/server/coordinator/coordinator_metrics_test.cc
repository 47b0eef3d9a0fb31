// CoordinatorMetrics: what a job's life leaves in the exposition, and that finished jobs
// do not pile up series.
#include "server/coordinator/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "common/jobspec/model_flops.h"
#include "common/metrics/registry.h"

namespace fp8::server {
namespace {

v1::Job make_job(const std::string& id, v1::Job::State state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_attempts(state == v1::Job::QUEUED ? 0 : 1);
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->set_owner("alice");
  job.mutable_spec()->mutable_fp8()->set_recipe(v1::Fp8Spec::TENSORWISE);
  job.mutable_spec()->mutable_resources()->set_world_size(2);
  job.mutable_spec()->mutable_resources()->set_device(v1::ResourceSpec::CPU);
  job.mutable_spec()->mutable_train()->set_steps(100);
  job.mutable_spec()->mutable_train()->set_batch_size(4);
  job.mutable_spec()->mutable_data()->set_seq_len(64);
  return job;
}

v1::TrainingProgress progress() {
  v1::TrainingProgress p;
  p.set_step(10);
  p.set_window_steps(5);
  p.set_loss(2.5);
  p.set_tokens_per_second(1000);  // one rank's
  p.mutable_step_time()->set_step_ms(40);
  p.mutable_step_time()->set_compute_ms(30);
  p.mutable_step_time()->set_exposed_comm_ms(8);
  p.mutable_communication()->set_all_gather_fp8_bytes(100);
  p.mutable_communication()->set_all_gather_bf16_bytes(20);     // fsdp.param_dtype bf16
  p.mutable_communication()->set_reduce_scatter_bf16_bytes(60);  // fsdp.reduce_dtype bf16
  return p;
}

v1::ReportCastNumericsRequest casts() {
  v1::ReportCastNumericsRequest r;
  v1::CastNumerics* c = r.add_casts();
  c->set_layer("layers.0.attention.wq");
  c->set_operand(v1::AmaxHistory::INPUT);
  c->set_amax(3.5f);
  c->set_scale(128);
  c->set_saturated_ratio(0.25f);
  return r;
}

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(CoordinatorMetrics, RunningJobShowsProgressSplitTrafficAndNumerics) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry);
  v1::Job job = make_job("job-1", v1::Job::RUNNING);
  (*job.mutable_spec()->mutable_labels())["team"] = "ml";
  (*job.mutable_spec()->mutable_labels())["purpose"] = "smoke,test";  // sorted by key, the comma escaped
  *job.mutable_latest_progress() = progress();
  m.on_job(job);
  m.on_rank_progress(job, 0, progress(), 0);
  m.on_rank_progress(job, 1, progress(), 0);
  m.on_cast_numerics("job-1", casts());
  const std::string text = registry.expose();
  EXPECT_TRUE(has(text, R"(fp8_job_state{job_id="job-1",state="RUNNING"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_state{job_id="job-1",state="QUEUED"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_tokens_per_second{job_id="job-1"} 2000)")) << "world size x rank 0's\n" << text;
  EXPECT_TRUE(has(text, R"(fp8_job_step_part_seconds{job_id="job-1",part="data"} 0.002)")) << text;
  // Both ranks' 5 steps of 100 fp8 bytes; both ranks' 5 steps of 4 x 64 tokens.
  EXPECT_TRUE(has(text, R"(fp8_job_communication_bytes_total{job_id="job-1",collective="all_gather",dtype="fp8"} 1000)"))
      << text;
  EXPECT_TRUE(has(text, R"(fp8_job_communication_bytes_total{job_id="job-1",collective="all_gather",dtype="bf16"} 200)"))
      << text;
  EXPECT_TRUE(
      has(text, R"(fp8_job_communication_bytes_total{job_id="job-1",collective="reduce_scatter",dtype="bf16"} 600)"))
      << text;
  // Nothing travelled in fp32: no series for it.
  EXPECT_EQ(text.find(R"(collective="reduce_scatter",dtype="fp32")"), std::string::npos) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_tokens_total{job_id="job-1"} 2560)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_cast_saturated_ratio{job_id="job-1",layer="layers.0.attention.wq",tensor="input"} 0.25)"))
      << text;
  EXPECT_TRUE(has(text,
                  R"(fp8_job_info{job_id="job-1",job_name="tiny",user="alice",recipe="tensorwise",device_kind="cpu",world_size="2",labels="purpose=smoke\\,test,team=ml"} 1)"))
      << text;
}

// Model FLOPs: tokens times the model's training FLOPs per token (jobspec/model_flops.h);
// MFU as each rank reported it, rank 0's for the job.
TEST(CoordinatorMetrics, ModelFlopsAndUtilisation) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry);
  v1::Job job = make_job("job-1", v1::Job::RUNNING);
  v1::ModelSpec* model = job.mutable_spec()->mutable_model();
  model->set_dim(64);
  model->set_n_layers(1);
  model->set_n_heads(4);
  model->set_n_kv_heads(4);
  model->set_ffn_dim(128);
  model->set_vocab_size(256);
  model->set_max_seq_len(64);
  v1::TrainingProgress rank0 = progress(), rank1 = progress();
  rank0.set_mfu(0.25);
  rank1.set_mfu(0.5);
  *job.mutable_latest_progress() = rank0;
  m.on_job(job);
  const double flops_per_token = jobspec::training_flops_per_token(job.spec());
  m.on_rank_progress(job, 0, rank0, flops_per_token);
  m.on_rank_progress(job, 1, rank1, flops_per_token);
  // Linear weights: 4 x 64 x 64 + 3 x 64 x 128 in the block, 64 x 256 in the output;
  // attention 12 x 1 x 64 x 64; both ranks' 5 steps of 4 x 64 tokens.
  const double per_token = 6.0 * (4 * 64 * 64 + 3 * 64 * 128 + 64 * 256) + 12.0 * 64 * 64;
  EXPECT_DOUBLE_EQ(registry.counter("fp8_job_model_flops_total", "", {"job_id"}).with({"job-1"}).value(),
                   2560 * per_token);
  EXPECT_DOUBLE_EQ(registry.gauge("fp8_job_mfu_ratio", "", {"job_id"}).with({"job-1"}).value(), 0.25);
  EXPECT_DOUBLE_EQ(registry.gauge("fp8_rank_mfu_ratio", "", {"job_id", "rank"}).with({"job-1", "1"}).value(), 0.5);
  // Each rank's own tokens beside the job's: 5 steps of 4 x 64 tokens each.
  metrics::CounterFamily& rank_tokens = registry.counter("fp8_rank_tokens_total", "", {"job_id", "rank"});
  EXPECT_DOUBLE_EQ(rank_tokens.with({"job-1", "0"}).value(), 1280);
  EXPECT_DOUBLE_EQ(rank_tokens.with({"job-1", "1"}).value(), 1280);
  EXPECT_DOUBLE_EQ(registry.counter("fp8_job_tokens_total", "", {"job_id"}).with({"job-1"}).value(), 2560);
}

// Two tensor-parallel ranks train one batch together: the job's rate and tokens count it
// once (rank 0's rate, each rank adding half its batch), and so do the model FLOPs; each
// rank still counts the batch it trained. The tensor axis's traffic and exposed time have
// series of their own, the data axis's none.
TEST(CoordinatorMetrics, TensorParallelRanksCountTheirSharedBatchOnce) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry);
  v1::Job job = make_job("job-1", v1::Job::RUNNING);
  job.mutable_spec()->mutable_parallel()->set_tensor(2);
  v1::TrainingProgress p;
  p.set_step(10);
  p.set_window_steps(5);
  p.set_loss(2.5);
  p.set_tokens_per_second(1000);
  p.mutable_step_time()->set_step_ms(40);
  p.mutable_step_time()->set_compute_ms(30);
  p.mutable_step_time()->set_exposed_comm_ms(6);
  p.mutable_step_time()->set_tensor_comm_ms(6);
  p.mutable_communication()->set_tensor_all_reduces(12);
  p.mutable_communication()->set_tensor_all_reduce_bytes(300);
  *job.mutable_latest_progress() = p;
  m.on_job(job);
  m.on_rank_progress(job, 0, p, 10);
  m.on_rank_progress(job, 1, p, 10);
  const std::string text = registry.expose();
  EXPECT_TRUE(has(text, R"(fp8_job_tokens_per_second{job_id="job-1"} 1000)")) << "one data-parallel rank\n" << text;
  // 5 steps of 4 x 64 tokens, once; 10 model FLOPs a token.
  EXPECT_TRUE(has(text, R"(fp8_job_tokens_total{job_id="job-1"} 1280)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_model_flops_total{job_id="job-1"} 12800)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_rank_tokens_total{job_id="job-1",rank="1"} 1280)")) << text;
  // Both ranks' 5 steps of 300 bytes.
  EXPECT_TRUE(
      has(text, R"(fp8_job_communication_bytes_total{job_id="job-1",collective="tensor_all_reduce",dtype="fp32"} 3000)"))
      << text;
  EXPECT_EQ(text.find(R"(collective="all_gather")"), std::string::npos) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_tensor_parallel_exposed_seconds{job_id="job-1"} 0.006)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_step_part_seconds{job_id="job-1",part="exposed_communication"} 0.006)")) << text;

  // A job without tensor parallelism has no such series.
  v1::Job fsdp = make_job("job-2", v1::Job::RUNNING);
  *fsdp.mutable_latest_progress() = progress();
  m.on_job(fsdp);
  EXPECT_EQ(registry.expose().find(R"(fp8_job_tensor_parallel_exposed_seconds{job_id="job-2"})"), std::string::npos);

  // A 2 x 2 mesh: two data-parallel ranks, each a pair sharing a batch.
  v1::Job mesh = make_job("job-3", v1::Job::RUNNING);
  mesh.mutable_spec()->mutable_resources()->set_world_size(4);
  mesh.mutable_spec()->mutable_parallel()->set_tensor(2);
  *mesh.mutable_latest_progress() = p;
  m.on_job(mesh);
  for (int rank = 0; rank < 4; ++rank) m.on_rank_progress(mesh, rank, p, 10);
  EXPECT_TRUE(has(registry.expose(), R"(fp8_job_tokens_per_second{job_id="job-3"} 2000)")) << registry.expose();
  EXPECT_DOUBLE_EQ(registry.counter("fp8_job_tokens_total", "", {"job_id"}).with({"job-3"}).value(), 2 * 1280);
}

// A finished job keeps its summary; its casts stay until the next job finishes (a job
// shorter than a scrape interval still has its last report scraped), then go.
TEST(CoordinatorMetrics, EndedJobKeepsItsSummaryAndItsCastsUntilTheNextJobEnds) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry);
  m.on_job(make_job("job-1", v1::Job::RUNNING));
  m.on_cast_numerics("job-1", casts());
  v1::Job done = make_job("job-1", v1::Job::SUCCEEDED);
  m.on_job(done);
  m.on_job(done);  // a later change of a final job counts once
  std::string text = registry.expose();
  EXPECT_NE(text.find(R"(fp8_cast_amax{job_id="job-1")"), std::string::npos) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_state{job_id="job-1",state="SUCCEEDED"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_jobs_finished_total{state="SUCCEEDED"} 1)")) << text;

  m.on_job(make_job("job-2", v1::Job::RUNNING));
  m.on_cast_numerics("job-2", casts());
  m.on_job(make_job("job-2", v1::Job::FAILED));
  text = registry.expose();
  EXPECT_EQ(text.find(R"(fp8_cast_amax{job_id="job-1")"), std::string::npos) << "job-1's casts go\n" << text;
  EXPECT_NE(text.find(R"(fp8_cast_amax{job_id="job-2")"), std::string::npos) << text;
  EXPECT_TRUE(has(text, R"(fp8_job_state{job_id="job-1",state="SUCCEEDED"} 1)")) << "its summary stays\n" << text;
}

TEST(CoordinatorMetrics, OnlyTheMostRecentFinishedJobsKeepSeries) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry, /*keep_finished=*/2);
  for (const char* id : {"job-1", "job-2", "job-3"}) m.on_job(make_job(id, v1::Job::FAILED));
  m.on_job(make_job("job-4", v1::Job::QUEUED));
  const std::string text = registry.expose();
  EXPECT_EQ(text.find(R"(job_id="job-1")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(fp8_job_state{job_id="job-2",state="FAILED"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(fp8_job_state{job_id="job-4",state="QUEUED"} 1)"), std::string::npos) << "active jobs stay";
}

TEST(CoordinatorMetrics, ClusterCountsWriteZerosForEmptiedStates) {
  metrics::Registry registry;
  CoordinatorMetrics m(registry);
  ClusterCounts busy;
  busy.workers[{"cpu", "busy"}] = 2;
  busy.queued["cpu"] = 3;
  busy.active_jobs["RUNNING"] = 1;
  m.set_cluster(busy);
  m.set_cluster(ClusterCounts{});
  const std::string text = registry.expose();
  EXPECT_TRUE(has(text, R"(fp8_workers{device_kind="cpu",state="busy"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_scheduler_queue_depth{device_kind="cpu"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_scheduler_jobs{state="RUNNING"} 0)")) << text;
}

}  // namespace
}  // namespace fp8::server
