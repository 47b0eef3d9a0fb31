// Every job.yaml field the training loop reads changes what a run does: a tiny job trained
// for a few steps with one field changed differs from the same job as written (its losses,
// learning rates, gradient norms, the steps it reports, validation losses, checkpoints or
// final weights), while the job trained twice as written is the same bit for bit, so that
// "differs" means the field acted. tests/common/jobspec_fields_test.cc names this test for
// the fields below.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/jobspec/loader.h"
#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

namespace fs = std::filesystem;

// One field changed: `overrides` on top of the job as written plus `base` (which both
// runs get, for a field that acts only next to another one, such as a delayed recipe's
// amax_history_len). In overrides "{dir}" is the test's scratch folder.
struct FieldChange {
  const char* field;
  std::vector<std::string> overrides;
  std::vector<std::string> base = {};
};

void PrintTo(const FieldChange& c, std::ostream* os) { *os << c.field; }

// What a run did, as far as any field can change it.
struct Outcome {
  std::vector<std::string> reports;  // a line per reported step, floats in hex (exact)
  std::vector<int64_t> checkpoints;  // the steps checkpointed
  std::vector<std::string> kept;     // the step folders left after retention
  std::map<std::string, std::vector<float>> weights;  // the final parameters by name

  bool operator==(const Outcome&) const = default;
};

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

class SpecFieldEffects : public ::testing::TestWithParam<FieldChange> {
 protected:
  void SetUp() override {
    write_synthetic_corpus(dir() / "corpus.txt", 200'000);
    // Other text of the same kind, for data.path and data.val_path.
    write_synthetic_corpus(dir() / "other.txt", 300'000);
    std::ifstream in(dir() / "other.txt", std::ios::binary);
    const std::string other((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir() / "corpus-b.txt", std::ios::binary) << other.substr(100'000);
    std::ofstream(dir() / "val-a.txt", std::ios::binary) << other.substr(0, 20'000);
    std::ofstream(dir() / "val-b.txt", std::ios::binary) << other.substr(40'000, 20'000);
  }

  const fs::path& dir() const { return tmp_.path(); }

  // The job as written (4 steps of a 2-layer model, a report every step, an evaluation
  // and a checkpoint every 2), with `overrides`.
  Outcome train(const std::vector<std::string>& overrides) {
    const fs::path checkpoints = dir() / absl::StrCat("run-", runs_++);
    const std::string yaml = absl::StrCat(R"(name: fields
model: {dim: 32, n_layers: 2, n_heads: 2, ffn_dim: 64, max_seq_len: 32}
data: {path: )", (dir() / "corpus.txt").string(), R"(, seq_len: 32, val_fraction: 0.1}
train: {steps: 4, batch_size: 4, lr: 3e-3, warmup_steps: 1, log_every: 1, eval_every: 2, eval_batches: 2}
fp8: {recipe: tensorwise}
checkpoint: {dir: )", checkpoints.string(), R"(, every: 2, keep: 2}
)");
    std::vector<std::string> expanded;
    for (const std::string& o : overrides) expanded.push_back(absl::StrReplaceAll(o, {{"{dir}", dir().string()}}));
    Outcome out;
    const absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(yaml, "fields.yaml", expanded);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return out;
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(*spec, Device::cpu());
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return out;
    RecordingObserver log;
    const absl::StatusOr<TrainSummary> summary = (*trainer)->run(log);
    EXPECT_TRUE(summary.ok()) << summary.status();
    for (const StepReport& r : log.steps) {
      out.reports.push_back(absl::StrCat("step ", r.step, "/", r.total_steps, " loss ", hex(r.loss), " lr ", hex(r.lr),
                                         " grad_norm ", hex(r.grad_norm), " val ",
                                         r.val_loss ? hex(*r.val_loss) : "-"));
    }
    out.checkpoints = log.checkpoints;
    if (fs::is_directory(checkpoints)) {
      for (const fs::directory_entry& e : fs::directory_iterator(checkpoints)) {
        out.kept.push_back(e.path().filename().string());
      }
      std::sort(out.kept.begin(), out.kept.end());
    }
    for (const Parameter& p : (*trainer)->trained_parameters().all()) {
      absl::StatusOr<std::vector<float>> values = p.value.download<float>();
      EXPECT_TRUE(values.ok()) << values.status();
      if (values.ok()) out.weights[p.name] = *std::move(values);
    }
    return out;
  }

  TempDir tmp_{"spec-field-effects"};
  int runs_ = 0;
};

// Without this, a difference below could come from the run rather than the field.
TEST_F(SpecFieldEffects, TheJobAsWrittenRepeatsBitForBit) {
  const Outcome a = train({}), b = train({});
  ASSERT_EQ(a.reports.size(), 4u);
  EXPECT_EQ(a.checkpoints, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a.kept, (std::vector<std::string>{checkpoint::step_directory_name(2), checkpoint::step_directory_name(4)}));
  EXPECT_FALSE(a.weights.empty());
  EXPECT_TRUE(a == b) << "two runs of one job differ";
}

TEST_P(SpecFieldEffects, ARunWithTheFieldChangedDiffersFromTheJobAsWritten) {
  const FieldChange& change = GetParam();
  std::vector<std::string> changed = change.base;
  changed.insert(changed.end(), change.overrides.begin(), change.overrides.end());
  const Outcome as_written = train(change.base);
  const Outcome with_change = train(changed);
  ASSERT_FALSE(as_written.reports.empty());
  ASSERT_FALSE(with_change.reports.empty());
  EXPECT_FALSE(as_written == with_change)
      << change.field << " did nothing: the job trained with " << absl::StrJoin(change.overrides, " ")
      << " is bit for bit the job as written";
}

INSTANTIATE_TEST_SUITE_P(
    Fields, SpecFieldEffects,
    ::testing::Values(
        FieldChange{"model.vocab_size", {"model.vocab_size=320"}},
        FieldChange{"model.dim", {"model.dim=64"}},
        FieldChange{"model.n_layers", {"model.n_layers=1"}},
        FieldChange{"model.n_heads", {"model.n_heads=4"}},
        FieldChange{"model.n_kv_heads", {"model.n_kv_heads=1"}},
        FieldChange{"model.ffn_dim", {"model.ffn_dim=96"}},
        FieldChange{"model.rope_theta", {"model.rope_theta=100"}},
        FieldChange{"model.norm_eps", {"model.norm_eps=0.1"}},
        FieldChange{"model.tie_embeddings", {"model.tie_embeddings=true"}},
        FieldChange{"data.path", {"data.path={dir}/corpus-b.txt"}},
        FieldChange{"data.seq_len", {"data.seq_len=16"}},
        FieldChange{"data.val_fraction", {"data.val_fraction=0.3"}},
        FieldChange{"data.seed", {"data.seed=1"}},
        // Evaluation data of its own: another file gives other validation losses.
        FieldChange{"data.val_path", {"data.val_path={dir}/val-b.txt"},
                    {"data.val_fraction=0", "data.val_path={dir}/val-a.txt"}},
        FieldChange{"train.steps", {"train.steps=5"}},
        FieldChange{"train.batch_size", {"train.batch_size=8"}},
        FieldChange{"train.grad_accum", {"train.grad_accum=2"}},
        FieldChange{"train.compute_dtype", {"train.compute_dtype=bf16"}},
        FieldChange{"train.lr", {"train.lr=1e-3"}},
        FieldChange{"train.min_lr", {"train.min_lr=0"}},
        FieldChange{"train.warmup_steps", {"train.warmup_steps=2"}},
        FieldChange{"train.schedule", {"train.schedule=linear"}},
        FieldChange{"train.weight_decay", {"train.weight_decay=0.5"}},
        FieldChange{"train.beta1", {"train.beta1=0.5"}},
        FieldChange{"train.beta2", {"train.beta2=0.5"}},
        FieldChange{"train.eps", {"train.eps=0.1"}},
        FieldChange{"train.grad_clip", {"train.grad_clip=0.01"}},
        FieldChange{"train.seed", {"train.seed=1"}},
        FieldChange{"train.log_every", {"train.log_every=2"}},
        FieldChange{"train.eval_every", {"train.eval_every=3"}},
        FieldChange{"train.eval_batches", {"train.eval_batches=3"}},
        FieldChange{"fp8.recipe", {"fp8.recipe=rowwise"}},
        // Only delayed scaling keeps amax histories.
        FieldChange{"fp8.amax_history_len", {"fp8.amax_history_len=1"}, {"fp8.recipe=delayed"}},
        FieldChange{"fp8.power_of_2_scales", {"fp8.power_of_2_scales=true"}},
        FieldChange{"fp8.include", {"fp8.include=['layers.0.*']"}},
        FieldChange{"fp8.exclude", {"fp8.exclude=[]"}},
        FieldChange{"checkpoint.every", {"checkpoint.every=3"}},
        FieldChange{"checkpoint.keep", {"checkpoint.keep=1"}}),
    [](const ::testing::TestParamInfo<FieldChange>& p) {
      return absl::StrReplaceAll(p.param.field, {{".", "_"}});
    });

}  // namespace
}  // namespace fp8::engine::testing
