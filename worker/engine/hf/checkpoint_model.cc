#include "worker/engine/hf/checkpoint_model.h"

#include <algorithm>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/train/checkpoint_rows.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/train_state_io.h"

namespace fp8::hf {

namespace {

absl::Status bad_input(const absl::Status& s) { return absl::InvalidArgumentError(s.message()); }

// The newest committed checkpoint under a root, or the step directory named.
absl::StatusOr<checkpoint::CommittedCheckpoint> find_committed(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir.string(), ": no such checkpoint directory"));
  }
  const bool one_step = checkpoint::parse_step_directory_name(dir.filename().string()).has_value();
  const std::filesystem::path root = one_step ? dir.parent_path() : dir;
  absl::StatusOr<std::vector<checkpoint::CheckpointEntry>> entries = checkpoint::list_checkpoints(root);
  if (!entries.ok()) return bad_input(entries.status());
  for (const checkpoint::CheckpointEntry& e : *entries) {
    if (one_step && e.dir.filename() != dir.filename()) continue;
    if (e.state == checkpoint::CheckpointState::kCommitted) return checkpoint::CommittedCheckpoint{e.dir, *e.marker};
    if (one_step) {
      return absl::InvalidArgumentError(absl::StrCat(dir.string(), ": not a committed checkpoint (",
                                                     std::string(checkpoint::checkpoint_state_name(e.state)), ": ", e.problem, ")"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(dir.string(), ": holds no committed checkpoint"));
}

absl::StatusOr<v1::ModelSpec> model_spec_of(const checkpoint::ShardReader& shard) {
  const auto it = shard.metadata().find(std::string(engine::kModelSpecMetadata));
  if (it == shard.metadata().end()) {
    return absl::InvalidArgumentError(absl::StrCat(shard.path().string(),
                                                   ": records no model spec (written by an older version); "
                                                   "give the job file that trained it"));
  }
  v1::ModelSpec spec;
  if (!google::protobuf::TextFormat::ParseFromString(it->second, &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(shard.path().string(), ": its model spec does not parse"));
  }
  return spec;
}

}  // namespace

const NamedTensor* CheckpointModel::find(std::string_view name) const {
  for (const NamedTensor& t : parameters) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<CheckpointModel> read_checkpoint_model(const std::filesystem::path& dir,
                                                      const std::optional<v1::ModelSpec>& model) {
  FP8_ASSIGN_OR_RETURN(const checkpoint::CommittedCheckpoint committed, find_committed(dir));
  CheckpointModel out;
  out.step_dir = committed.dir;
  out.step = committed.step();
  out.world_size = committed.world_size();
  absl::StatusOr<engine::CheckpointRows> rows = engine::CheckpointRows::open(committed);
  if (!rows.ok()) return bad_input(rows.status());
  if (model) {
    out.spec = *model;
  } else {
    FP8_ASSIGN_OR_RETURN(out.spec, model_spec_of(rows->first()));
  }
  absl::StatusOr<engine::LlamaConfig> config = engine::llama_config_from_spec(out.spec);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(rows->first().path().string(), ": ", config.status().message()));
  }
  out.config = *config;
  for (const ParameterShape& p : llama_parameter_shapes(out.config)) {
    // Payload checksums are checked here, as each record is read.
    // The vocabulary's padding rows are left behind.
    absl::StatusOr<std::vector<float>> values = rows->rows("params/" + p.name, p.engine_shape(), 0, p.shape[0]);
    if (!values.ok()) return bad_input(values.status());
    NamedTensor t{p.name, p.shape, *std::move(values)};
    out.parameters.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<CheckpointModel> initial_checkpoint_model(const engine::LlamaConfig& config, uint64_t seed) {
  CheckpointModel m;
  m.config = config;
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::NONE);
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                       engine::LlamaModel::create(engine::Device::cpu(), m.config, fp8, seed));
  for (const engine::Parameter& p : model->parameters().all()) {
    FP8_ASSIGN_OR_RETURN(std::vector<float> values, p.value.download<float>());
    std::vector<int64_t> shape = p.value.shape();
    const int64_t row = p.value.numel() / shape[0];
    shape[0] -= p.padding_rows;
    values.resize(static_cast<size_t>(shape[0] * row));
    m.parameters.push_back({p.name, std::move(shape), std::move(values)});
  }
  return m;
}

}  // namespace fp8::hf
