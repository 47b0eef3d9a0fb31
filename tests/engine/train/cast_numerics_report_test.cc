// The training loop's cast numerics reports: at every step that reports (on_step), one
// record per (fp8 linear, tensor) right after it, with that step's amax, scale and range
// use, and saturation / underflow ratios measured during the step.
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Trainer> make_trainer(const v1::JobSpec& spec) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, Device::cpu());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Sets `count` entries of a linear's weight to a value so small that its fp8 cast flushes
// it to zero (1e-9 · 448 / amax is far below 2^-10 for any weight amax above 1e-3).
void plant_tiny_weights(LinearUnit& unit, int count) {
  absl::StatusOr<std::vector<float>> w = unit.weight->value.download<float>();
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < count; ++i) (*w)[static_cast<size_t>(i) * 7] = i % 2 == 0 ? 1e-9f : -1e-9f;
  ASSERT_TRUE(unit.weight->value.upload<float>(*w).ok());
}

class CastNumericsReportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { write_synthetic_corpus(corpus_, 200'000); }
  TempDir tmp_{"cast-numerics"};
  fs::path corpus_ = tmp_.path() / "corpus.txt";
};

TEST_P(CastNumericsReportTest, EveryReportStepCarriesEachCastOfEveryFp8Linear) {
  // Reports at 1 (first), 3 and 6 (log_every), 5 (evaluation only: unmeasured) and 7 (last).
  std::unique_ptr<Trainer> trainer = make_trainer(tiny_job(
      corpus_, tmp_.path() / "ckpt",
      {"fp8.recipe=" + GetParam(), "train.steps=7", "train.log_every=3", "train.eval_every=5"}));
  ASSERT_NE(trainer, nullptr);

  std::set<std::string> fp8_layers;
  LinearUnit* planted = nullptr;
  for (LinearUnit* unit : trainer->model().mutable_linears()) {
    if (!unit->selection.fp8) continue;
    fp8_layers.insert(unit->name);
    if (planted == nullptr) planted = unit;
  }
  ASSERT_FALSE(fp8_layers.empty());
  constexpr int kTiny = 9;
  plant_tiny_weights(*planted, kTiny);
  if (HasFatalFailure()) return;
  const Float8LinearInfo& info = planted->layer->info();
  const double weight_elements = static_cast<double>(info.in_features * info.out_features);

  RecordingObserver log;
  absl::StatusOr<TrainSummary> summary = trainer->run(log);
  ASSERT_TRUE(summary.ok()) << summary.status();

  // Right after each on_step, and only then.
  std::vector<int64_t> report_steps, numerics_steps;
  for (const StepReport& r : log.steps) report_steps.push_back(r.step);
  for (const auto& [step, casts] : log.cast_numerics) numerics_steps.push_back(step);
  EXPECT_EQ(report_steps, (std::vector<int64_t>{1, 3, 5, 6, 7}));
  EXPECT_EQ(numerics_steps, report_steps);

  for (const auto& [step, casts] : log.cast_numerics) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    // One record per (layer, tensor): axiswise recipes' two casts of a tensor merge.
    EXPECT_EQ(casts.size(), 3 * fp8_layers.size());
    std::set<std::pair<std::string, std::string>> seen;
    for (const CastNumericsRecord& c : casts) {
      SCOPED_TRACE(c.layer + " " + c.tensor);
      EXPECT_TRUE(seen.insert({c.layer, c.tensor}).second) << "duplicate record";
      EXPECT_EQ(fp8_layers.count(c.layer), 1u);
      EXPECT_TRUE(c.tensor == "input" || c.tensor == "weight" || c.tensor == "grad_output") << c.tensor;
      EXPECT_TRUE(std::isfinite(c.amax));
      EXPECT_GT(c.amax, 0.0f);
      EXPECT_TRUE(std::isfinite(c.scale));
      EXPECT_GT(c.scale, 0.0f);
      EXPECT_TRUE(std::isfinite(c.range_use));
      EXPECT_GE(c.saturated_ratio, 0.0f);
      EXPECT_LE(c.saturated_ratio, 1.0f);
      EXPECT_GE(c.underflow_ratio, 0.0f);
      EXPECT_LE(c.underflow_ratio, 1.0f);
      if (GetParam() != "delayed") {
        EXPECT_EQ(c.saturated_ratio, 0.0f) << "dynamic scaling cannot clip";
      }
      if (step == 5) {
        // Reports only because it evaluates, which is known only after the step ran.
        EXPECT_EQ(c.saturated_ratio, 0.0f) << "unmeasured";
        EXPECT_EQ(c.underflow_ratio, 0.0f) << "unmeasured";
      }
    }
  }

  // Step 1 was measured: the planted weights flushed to zero in its forward, before the
  // optimizer moved them (the first step scales dynamically under every recipe).
  ASSERT_FALSE(log.cast_numerics.empty());
  const std::vector<CastNumericsRecord>& first = log.cast_numerics.front().second;
  bool found = false;
  for (const CastNumericsRecord& c : first) {
    if (c.layer != planted->name || c.tensor != "weight") continue;
    found = true;
    EXPECT_GE(c.underflow_ratio, static_cast<float>(kTiny / weight_elements));
    EXPECT_LE(c.underflow_ratio, static_cast<float>((kTiny + 2) / weight_elements));
  }
  EXPECT_TRUE(found) << planted->name << " weight";
}

INSTANTIATE_TEST_SUITE_P(Recipes, CastNumericsReportTest, ::testing::Values("tensorwise", "rowwise", "delayed"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace fp8::engine::testing
