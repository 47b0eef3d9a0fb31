// bench/op_breakdown.h: the profiler's arithmetic on a scripted clock, and the profiling
// wrappers around the CPU device, on which a trainer trains bit for bit as on the device
// itself while every op of its steps is accounted for.
#include "bench/op_breakdown.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"
#include "worker/engine/train/trainer.h"

namespace fp8::bench {
namespace {

// Marks that read a scripted clock; the mark numbered fail_at fails.
class ScriptedTimer final : public OpTimer {
 public:
  explicit ScriptedTimer(std::vector<double> clock, int fail_at = -1) : clock_(std::move(clock)), fail_at_(fail_at) {}
  absl::Status mark() override {
    if (next_ == fail_at_) return absl::InternalError("no event left");
    marks_.push_back(clock_.at(static_cast<size_t>(next_++)));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> take() override {
    std::vector<double> s;
    for (double m : marks_) s.push_back(m - marks_.front());
    marks_.clear();
    return s;
  }
  // Scripted too: the answers to passed_last_mark(), in order (false once they run out).
  std::vector<bool> idle;
  bool passed_last_mark() override { return asked_ < idle.size() && idle[asked_++]; }

 private:
  std::vector<double> clock_, marks_;
  int next_ = 0, fail_at_;
  size_t asked_ = 0;
};

absl::Status ok() { return absl::OkStatus(); }

const OpTime* find(const OpBreakdown& b, const std::string& label) {
  const auto it = std::find_if(b.ops.begin(), b.ops.end(), [&](const OpTime& t) { return t.label == label; });
  return it == b.ops.end() ? nullptr : &*it;
}

TEST(OpProfiler, SumsEachLabelsOpsAndTheTimeBetweenOps) {
  // a: 10-12, then 1 s idle, b: 13-17, then 0.5 s, a: 17.5-18.
  OpProfiler p(std::make_unique<ScriptedTimer>(std::vector<double>{10, 12, 13, 17, 17.5, 18}));
  p.set_on(true);
  ASSERT_TRUE(p.run("a", ok).ok());
  ASSERT_TRUE(p.run("b", ok).ok());
  ASSERT_TRUE(p.run("a", ok).ok());
  absl::StatusOr<OpBreakdown> b = p.take();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->ops.size(), 2u);
  EXPECT_EQ(b->ops[0].label, "b");  // most time first
  EXPECT_DOUBLE_EQ(b->ops[0].seconds, 4.0);
  EXPECT_EQ(b->ops[0].calls, 1);
  EXPECT_EQ(b->ops[1].label, "a");
  EXPECT_DOUBLE_EQ(b->ops[1].seconds, 2.5);
  EXPECT_EQ(b->ops[1].calls, 2);
  EXPECT_DOUBLE_EQ(b->between_s, 1.5);
  EXPECT_DOUBLE_EQ(b->span_s, 8.0);
  // take() forgets what it returned.
  absl::StatusOr<OpBreakdown> again = p.take();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->ops.empty());
  EXPECT_EQ(again->span_s, 0.0);
}

TEST(OpProfiler, OpsRunUnmarkedWhileOffAndTheirResultsPassThrough) {
  OpProfiler p(std::make_unique<ScriptedTimer>(std::vector<double>{0, 1}));
  absl::StatusOr<double> value = p.run("off", [] { return absl::StatusOr<double>(42.0); });
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 42.0);
  p.set_on(true);
  EXPECT_EQ(p.run("on", [] { return absl::InvalidArgumentError("bad shape"); }).message(), "bad shape");
  absl::StatusOr<OpBreakdown> b = p.take();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->ops.size(), 1u);  // only the op run while on
  EXPECT_EQ(b->ops[0].label, "on");
}

TEST(OpProfiler, AFailedMarkStopsMarkingButNotTheOpsAndTakeSaysWhy) {
  OpProfiler p(std::make_unique<ScriptedTimer>(std::vector<double>{0, 1, 2, 3}, /*fail_at=*/1));
  p.set_on(true);
  int ran = 0;
  auto op = [&] {
    ++ran;
    return absl::OkStatus();
  };
  EXPECT_TRUE(p.run("a", op).ok());
  EXPECT_TRUE(p.run("a", op).ok());
  EXPECT_EQ(ran, 2);
  EXPECT_FALSE(p.on());
  p.set_on(true);  // stays off after an error
  EXPECT_FALSE(p.on());
  absl::StatusOr<OpBreakdown> b = p.take();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("no event left"), std::string::npos);
}

TEST(OpProfiler, CountsTheCallsIssuedWhenTheDeviceHadCaughtUp) {
  auto timer = std::make_unique<ScriptedTimer>(std::vector<double>{0, 1, 2, 3, 4, 5});
  timer->idle = {false, true, true};  // asked before each op's first mark
  OpProfiler p(std::move(timer));
  p.set_on(true);
  ASSERT_TRUE(p.run("a", ok).ok());
  ASSERT_TRUE(p.run("a", ok).ok());
  ASSERT_TRUE(p.run("b", ok).ok());
  absl::StatusOr<OpBreakdown> b = p.take();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(find(*b, "a")->issued_to_idle_device, 1);
  EXPECT_EQ(find(*b, "b")->issued_to_idle_device, 1);
}

TEST(OpProfiler, LabelsGemmsCastsAndCopiesWithTheirShapesWhenAskedTo) {
  OpProfiler p(host_op_timer());
  ProfilingBackend backend(cpu_backend(), p);
  const std::vector<float> x(6 * 4, 1.0f), w(2 * 4, 1.0f);
  std::vector<float> out(6 * 2);
  GemmArgs g;
  g.m = 6;
  g.n = 2;
  g.k = 4;
  g.a = x.data();
  g.b = w.data();
  g.trans_b = true;
  g.out = out.data();
  std::vector<uint8_t> codes(6 * 4), codes_t(6 * 4);
  std::vector<float> scale(1), row_amax(6, 1.0f);
  QuantizeArgs q;
  q.input = {x.data(), DType::kFloat32, 6, 4};
  q.out = codes.data();
  q.out_t = codes_t.data();
  q.scale_out = scale.data();
  q.row_amax = row_amax.data();
  p.set_on(true);
  ASSERT_TRUE(backend.gemm(g).ok());
  ASSERT_TRUE(backend.quantize(q).ok());
  p.set_by_shape(true);
  ASSERT_TRUE(backend.gemm(g).ok());
  g.beta = 1.0f;
  ASSERT_TRUE(backend.gemm(g).ok());
  ASSERT_TRUE(backend.quantize(q).ok());
  ASSERT_TRUE(backend.copy(out.data(), x.data(), 8).ok());
  ASSERT_TRUE(backend.copy_rows(out.data(), 8, x.data(), 16, 8, 3).ok());
  absl::StatusOr<OpBreakdown> b = p.take();
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<std::string> labels;
  for (const OpTime& t : b->ops) labels.push_back(t.label);
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<std::string>{"device copies 3 x 8 B", "device copies 8 B", "fp32 GEMM",
                                              "fp32 GEMM 6x4x2 float32", "fp32 GEMM 6x4x2 float32 +C",
                                              "quantize tensorwise",
                                              "quantize tensorwise 6x4 float32 T (known row amaxes)"}));
}

// Turns the profiler on for one step alone (TrainObserver::on_step_start).
class ProfileOneStep final : public engine::TrainObserver {
 public:
  ProfileOneStep(OpProfiler& p, int64_t step) : p_(p), step_(step) {}
  void on_step_start(int64_t step) override {
    starts.push_back(step);
    p_.set_on(step == step_);
  }
  void on_step(const engine::StepReport& r) override { losses.push_back(r.loss); }
  std::vector<int64_t> starts;
  std::vector<double> losses;

 private:
  OpProfiler& p_;
  int64_t step_;
};

// The CPU device behind the profiling wrappers: a trainer built on `device` trains as on
// the CPU while `profiler` accounts for its ops.
struct ProfiledCpu {
  ProfiledCpu()
      : profiler(host_op_timer()),
        backend(engine::Device::cpu().backend(), profiler),
        ops(*engine::Device::cpu().model_ops().value(), profiler),
        device("cpu", &backend, &ops) {}
  OpProfiler profiler;
  ProfilingBackend backend;
  ProfilingModelOps ops;
  const engine::Device device;
};

class ProfilingDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { engine::testing::write_synthetic_corpus(corpus_, 200'000); }
  v1::JobSpec job(const std::string& dir) {
    return engine::testing::tiny_job(corpus_, tmp_.path() / dir, {"train.steps=4", "train.eval_every=0"});
  }
  engine::testing::TempDir tmp_{"op-breakdown"};
  std::filesystem::path corpus_ = tmp_.path() / "corpus.txt";
};

TEST_F(ProfilingDeviceTest, TrainsBitForBitAsTheDeviceItselfAndAccountsForTheProfiledStep) {
  const engine::Device& cpu = engine::Device::cpu();
  absl::StatusOr<std::unique_ptr<engine::Trainer>> plain = engine::Trainer::create(job("plain"), cpu);
  ASSERT_TRUE(plain.ok()) << plain.status();
  engine::testing::RecordingObserver plain_log;
  ASSERT_TRUE((*plain)->run(plain_log).ok());

  ProfiledCpu profiled;
  OpProfiler& profiler = profiled.profiler;
  absl::StatusOr<std::unique_ptr<engine::Trainer>> traced = engine::Trainer::create(job("traced"), profiled.device);
  ASSERT_TRUE(traced.ok()) << traced.status();
  ProfileOneStep log(profiler, 2);
  ASSERT_TRUE((*traced)->run(log).ok());

  // Every step started once, in order, and trained to the same bits.
  EXPECT_EQ(log.starts, (std::vector<int64_t>{1, 2, 3, 4}));
  ASSERT_EQ(log.losses.size(), plain_log.steps.size());
  for (size_t i = 0; i < log.losses.size(); ++i) EXPECT_EQ(log.losses[i], plain_log.steps[i].loss) << "step " << i + 1;

  // Step 2 alone was marked: each of its ops once per call.
  absl::StatusOr<OpBreakdown> b = profiler.take();
  ASSERT_TRUE(b.ok()) << b.status();
  const engine::LlamaConfig& c = (*traced)->model().config();
  ASSERT_NE(find(*b, "attention forward"), nullptr);
  EXPECT_EQ(find(*b, "attention forward")->calls, c.n_layers);
  EXPECT_EQ(find(*b, "attention backward")->calls, c.n_layers);
  EXPECT_EQ(find(*b, "embedding forward")->calls, 1);
  EXPECT_EQ(find(*b, "cross-entropy forward")->calls, 1);
  // The seven linears of each layer in fp8 (the output projection stays high precision):
  // three GEMMs each.
  ASSERT_NE(find(*b, "fp8 GEMM"), nullptr);
  EXPECT_EQ(find(*b, "fp8 GEMM")->calls, 3 * 7 * c.n_layers);
  EXPECT_EQ(find(*b, "fp32 GEMM")->calls, 3);
  ASSERT_NE(find(*b, "AdamW"), nullptr);
  EXPECT_GT(find(*b, "AdamW")->calls, 0);
  // The ops and the time between them make up the span.
  const double ops_s = std::accumulate(b->ops.begin(), b->ops.end(), 0.0,
                                       [](double s, const OpTime& t) { return s + t.seconds; });
  EXPECT_GT(b->span_s, 0.0);
  EXPECT_NEAR(ops_s + b->between_s, b->span_s, 1e-9 * std::max(1.0, b->span_s));
}

// The rule for a one-process step: the host never waits for the device inside it
// (the losses and norms stay on the device until a step reports; clipping and delayed
// scaling happen there), so on a GPU it queues the next step while this one runs. Step 3
// of 4 neither reports nor checkpoints; with every recipe it makes no call at which a GPU's
// host would wait.
class OneProcessStep : public ProfilingDeviceTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(OneProcessStep, MakesNoCallThatWaitsForTheDevice) {
  const v1::JobSpec spec = engine::testing::tiny_job(
      corpus_, tmp_.path() / GetParam(),
      {"train.steps=4", "train.eval_every=0", "train.log_every=100", "train.grad_accum=2",
       "fp8.recipe=" + GetParam()});
  ProfiledCpu profiled;
  OpProfiler& profiler = profiled.profiler;
  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer = engine::Trainer::create(spec, profiled.device);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ProfileOneStep log(profiler, 3);
  ASSERT_TRUE((*trainer)->run(log).ok());
  EXPECT_EQ(log.losses.size(), 2u) << "steps 1 and 4 report, step 3 does not";

  absl::StatusOr<OpBreakdown> b = profiler.take();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(find(*b, "AdamW"), nullptr) << "step 3 was profiled";
  EXPECT_NE(find(*b, "queued uploads"), nullptr) << "its token ids went up without a wait";
  for (const OpTime& t : b->ops) {
    EXPECT_NE(t.label.rfind(kHostWaitPrefix, 0), 0u) << t.label << ": " << t.calls << " calls";
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, OneProcessStep,
                         ::testing::Values("none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// A step that reports (step 2 of 4, log_every 2) reads what it reports in a few copies:
// the steps' losses and norms once, each fp8 linear's cast numerics once
// (Float8Linear::numerics) and, under delayed scaling, each linear's amax histories once.
TEST_P(OneProcessStep, ThatReportsReadsEachLinearOnceForEachThingItReports) {
  const v1::JobSpec spec = engine::testing::tiny_job(
      corpus_, tmp_.path() / GetParam(),
      {"train.steps=4", "train.eval_every=0", "train.log_every=2", "fp8.recipe=" + GetParam()});
  ProfiledCpu profiled;
  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer = engine::Trainer::create(spec, profiled.device);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ProfileOneStep log(profiled.profiler, 2);
  ASSERT_TRUE((*trainer)->run(log).ok());
  absl::StatusOr<OpBreakdown> b = profiled.profiler.take();
  ASSERT_TRUE(b.ok()) << b.status();

  int64_t fp8_linears = 0, delayed_linears = 0;
  for (const engine::LinearUnit* u : (*trainer)->model().linears()) {
    if (u->selection.fp8) ++fp8_linears;
    if (u->layer->delayed().count() > 0) ++delayed_linears;
  }
  const OpTime* reads = find(*b, kHostWaitRead);
  ASSERT_NE(reads, nullptr);
  EXPECT_EQ(reads->calls, 1 + fp8_linears + delayed_linears) << "the step's values, numerics, amax histories";
  for (const OpTime& t : b->ops) {
    if (t.label != kHostWaitRead) {
      EXPECT_NE(t.label.rfind(kHostWaitPrefix, 0), 0u) << t.label;
    }
  }
}

// The same rule under FSDP (one rank over a real Gloo group): the fp8 weight scales come
// from the reduced amaxes on the device, the step's losses, norm and stop vote are summed
// there, the clipping factor derived there, and the votes read back a step later
// (Backend::queue_read), so step 3 (which does not report) makes no call at which a GPU's
// host would wait. Its collectives do not show here: on a GPU they are queued like
// kernels (collectives/queued_collectives.h).
class FsdpStep : public ProfilingDeviceTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(FsdpStep, MakesNoCallThatWaitsForTheDevice) {
  v1::JobSpec spec = engine::testing::tiny_job(
      corpus_, tmp_.path() / GetParam(),
      {"train.steps=4", "train.eval_every=0", "train.log_every=100", "fp8.recipe=" + GetParam()});
  spec.mutable_resources()->set_world_size(1);
  absl::StatusOr<std::unique_ptr<engine::collectives::FileStore>> store =
      engine::collectives::FileStore::open(tmp_.path() / (GetParam() + "-store"));
  ASSERT_TRUE(store.ok()) << store.status();
  engine::collectives::ProcessGroupOptions options;
  options.prefix = "fsdp-step/";
  absl::StatusOr<std::unique_ptr<engine::collectives::ProcessGroup>> group =
      engine::collectives::make_gloo_process_group(**store, 0, 1, options);
  ASSERT_TRUE(group.ok()) << group.status();
  ProfiledCpu profiled;
  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer =
      engine::Trainer::create(spec, profiled.device, group->get());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_NE((*trainer)->fsdp(), nullptr);
  ProfileOneStep log(profiled.profiler, 3);
  ASSERT_TRUE((*trainer)->run(log).ok());
  ASSERT_EQ(log.losses.size(), 2u) << "steps 1 and 4 report, step 3 does not";
  EXPECT_TRUE(std::isfinite(log.losses[1]));

  absl::StatusOr<OpBreakdown> b = profiled.profiler.take();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(find(*b, "AdamW"), nullptr) << "step 3 was profiled";
  ASSERT_NE(find(*b, "queued reads"), nullptr) << "the step's stop votes went back without a wait";
  EXPECT_EQ(find(*b, "queued reads")->calls, 1);
  for (const OpTime& t : b->ops) {
    EXPECT_NE(t.label.rfind(kHostWaitPrefix, 0), 0u) << t.label << ": " << t.calls << " calls";
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, FsdpStep, ::testing::Values("none", "tensorwise", "delayed"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace fp8::bench
