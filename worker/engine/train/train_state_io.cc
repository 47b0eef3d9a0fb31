#include "worker/engine/train/train_state_io.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fp8/v1/job.pb.h"
#include "google/protobuf/text_format.h"
#include "worker/engine/fsdp/shard_layout.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

using checkpoint::Shape;

Shape shape_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end()); }

// Tensors go through host memory: the checkpoint writer streams from host buffers.
absl::Status write_tensor(checkpoint::ShardWriter& w, const std::string& name, const Tensor& t) {
  FP8_ASSIGN_OR_RETURN(std::vector<float> host, t.download<float>());
  return w.write_tensor<float>(name, host, shape_of(t));
}

absl::Status read_tensor(const checkpoint::ShardReader& r, const std::string& name, Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  FP8_RETURN_IF_ERROR(r.read_tensor<float>(name, host, shape_of(t)));
  return t.upload<float>(host);
}

std::string scaling_record(const LinearUnit& u) { return absl::StrCat("fp8/", u.name, "/scaling"); }

int64_t seed_bits(uint64_t seed) { return std::bit_cast<int64_t>(seed); }

absl::Status check_seed(const checkpoint::ShardReader& r, const char* record, uint64_t expected, const char* field) {
  FP8_ASSIGN_OR_RETURN(int64_t stored, r.read_scalar<int64_t>(record));
  if (std::bit_cast<uint64_t>(stored) != expected) {
    return absl::FailedPreconditionError(absl::StrCat(r.path().string(), ": written with ", field, " ",
                                                      std::bit_cast<uint64_t>(stored), ", but the job has ",
                                                      expected, "; resuming would change the run"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<WholeRecord> whole_records(const ParameterSet& params) {
  // The order the records have always had in a checkpoint: every parameter, then the
  // moments parameter by parameter.
  std::vector<WholeRecord> records;
  const auto& all = params.all();
  for (size_t i = 0; i < all.size(); ++i) records.push_back({"params/" + all[i].name, i, WholeRecord::kValue});
  for (size_t i = 0; i < all.size(); ++i) {
    records.push_back({"optim/exp_avg/" + all[i].name, i, WholeRecord::kExpAvg});
    records.push_back({"optim/exp_avg_sq/" + all[i].name, i, WholeRecord::kExpAvgSq});
  }
  return records;
}

absl::Status write_train_state(checkpoint::ShardWriter& w, const TrainStateRefs& s) {
  const v1::JobSpec& spec = *s.spec;
  FP8_RETURN_IF_ERROR(w.set_metadata("job", spec.name()));
  FP8_RETURN_IF_ERROR(w.set_metadata("model", s.model->config().describe()));
  FP8_RETURN_IF_ERROR(w.set_metadata("fp8.recipe", v1::Fp8Spec::Recipe_Name(spec.fp8().recipe())));
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string model_spec;
  if (!printer.PrintToString(spec.model(), &model_spec)) return absl::InternalError("checkpoint: cannot print model spec");
  FP8_RETURN_IF_ERROR(w.set_metadata(kModelSpecMetadata, model_spec));

  if (spec.parallel().tensor() > 1) {
    FP8_RETURN_IF_ERROR(w.set_metadata("mesh", absl::StrCat(spec.resources().world_size() / spec.parallel().tensor(),
                                                            " data-parallel x ", spec.parallel().tensor(),
                                                            " tensor-parallel ranks")));
  }

  const auto& params = s.params->all();
  if (s.whole != nullptr) {
    const WholeTensors& whole = *s.whole;
    if (whole.shapes.size() != params.size() || !whole.source) {
      return absl::InvalidArgumentError("write_train_state: whole tensors do not match the parameters");
    }
    for (const WholeRecord& record : whole_records(*s.params)) {
      FP8_ASSIGN_OR_RETURN(const std::vector<float> values, whole.source(record));
      const TensorShape& shape = whole.shapes[record.param];
      FP8_RETURN_IF_ERROR(w.write_tensor<float>(record.name, values, Shape(shape.begin(), shape.end())));
    }
  } else {
    for (const Parameter& p : params) FP8_RETURN_IF_ERROR(write_tensor(w, "params/" + p.name, p.value));
    for (size_t i = 0; i < params.size(); ++i) {
      FP8_RETURN_IF_ERROR(write_tensor(w, "optim/exp_avg/" + params[i].name, s.optimizer->first_moment(i)));
      FP8_RETURN_IF_ERROR(write_tensor(w, "optim/exp_avg_sq/" + params[i].name, s.optimizer->second_moment(i)));
    }
  }
  FP8_RETURN_IF_ERROR(w.write_scalar<int64_t>("optim/step", s.optimizer->steps_taken()));
  for (const LinearUnit* u : s.model->linears()) {
    if (u->layer->delayed().count() == 0) continue;
    FP8_ASSIGN_OR_RETURN(const std::vector<float> state, u->layer->save_scaling_state());
    FP8_RETURN_IF_ERROR(w.write_tensor<float>(scaling_record(*u), state, {static_cast<int64_t>(state.size())}));
  }
  const data::DataPosition position = s.batcher->position();
  FP8_RETURN_IF_ERROR(w.write_scalar<int64_t>("data/epoch", position.epoch));
  FP8_RETURN_IF_ERROR(w.write_scalar<int64_t>("data/index", position.index));
  FP8_RETURN_IF_ERROR(w.write_scalar<int64_t>("rng/init_seed", seed_bits(spec.train().seed())));
  return w.write_scalar<int64_t>("rng/data_seed", seed_bits(spec.data().seed()));
}

namespace {

// Fills `t`, trained parameter i's tensor or one of its moments, from `record`.
using ReadParamRecord = std::function<absl::Status(const std::string& record, size_t i, Tensor& t)>;

// read_train_state's two forms: parameter-shaped records through `read_param`, the rest
// from `r`.
absl::Status read_state(const checkpoint::ShardReader& r, const ReadParamRecord& read_param,
                        const TrainStateRefs& s) {
  const v1::JobSpec& spec = *s.spec;
  FP8_RETURN_IF_ERROR(check_seed(r, "rng/data_seed", spec.data().seed(), "data.seed"));

  auto& params = s.params->all();
  for (size_t i = 0; i < params.size(); ++i) {
    FP8_RETURN_IF_ERROR(read_param("params/" + params[i].name, i, params[i].value));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    FP8_RETURN_IF_ERROR(read_param("optim/exp_avg/" + params[i].name, i, s.optimizer->first_moment(i)));
    FP8_RETURN_IF_ERROR(read_param("optim/exp_avg_sq/" + params[i].name, i, s.optimizer->second_moment(i)));
  }
  FP8_ASSIGN_OR_RETURN(int64_t optim_step, r.read_scalar<int64_t>("optim/step"));
  s.optimizer->set_steps_taken(optim_step);
  for (const LinearUnit* u : s.model->linears()) {
    const std::string name = scaling_record(*u);
    const checkpoint::RecordInfo* info = r.find_record(name);
    if (u->layer->delayed().count() == 0) {
      if (info != nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(r.path().string(), ": has delayed-scaling state for ",
                                                          u->name, ", which this job's fp8 config does not delay"));
      }
      continue;
    }
    if (info == nullptr || info->shape.size() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(r.path().string(), ": no delayed-scaling state for ",
                                                        u->name, " (written with another fp8 recipe?)"));
    }
    std::vector<float> state(static_cast<size_t>(info->shape[0]));
    FP8_RETURN_IF_ERROR(r.read_tensor<float>(name, state, info->shape));
    if (absl::Status st = u->layer->restore_scaling_state(state); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(r.path().string(), ": ", name, ": ", st.message()));
    }
  }
  data::DataPosition position;
  FP8_ASSIGN_OR_RETURN(position.epoch, r.read_scalar<int64_t>("data/epoch"));
  FP8_ASSIGN_OR_RETURN(position.index, r.read_scalar<int64_t>("data/index"));
  return s.batcher->restore(position);
}

// A tensor-parallel rank's part of a whole matrix record: its rows, or its columns of every
// row (ParameterSplit).
absl::StatusOr<std::vector<float>> split_part(const CheckpointRows& checkpoint, const std::string& record,
                                              const TensorShape& whole, const ParameterSplit& split) {
  const int64_t rows = whole.at(0), cols = whole.size() > 1 ? whole.at(1) : 1;
  if (split.axis == 0) {
    const int64_t n = rows / split.parts;
    return checkpoint.rows(record, whole, split.index * n, (split.index + 1) * n);
  }
  FP8_ASSIGN_OR_RETURN(std::vector<float> all, checkpoint.rows(record, whole, 0, rows));
  const int64_t n = cols / split.parts;
  std::vector<float> part(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(all.begin() + r * cols + split.index * n, n, part.begin() + r * n);
  }
  return part;
}

}  // namespace

absl::Status read_train_state(const checkpoint::ShardReader& r, const TrainStateRefs& s) {
  return read_state(
      r, [&r](const std::string& record, size_t, Tensor& t) { return read_tensor(r, record, t); }, s);
}

absl::Status read_train_state(const CheckpointRows& checkpoint, const TrainStateRefs& s, const RankPart& part) {
  if (part.full_shapes.size() != s.params->all().size()) {
    return absl::InvalidArgumentError(absl::StrCat("read_train_state: ", part.full_shapes.size(), " shapes for ",
                                                   s.params->all().size(), " parameters"));
  }
  auto read_part = [&](const std::string& record, size_t i, Tensor& t) -> absl::Status {
    const TensorShape& whole = part.full_shapes[i];
    const ParameterSplit split = i < part.splits.size() ? part.splits[i] : ParameterSplit{};
    if (split.split()) {
      // This tensor-parallel rank's part of the record's whole tensor; under FSDP, its rows.
      TensorShape record_shape = whole;
      record_shape.at(static_cast<size_t>(split.axis)) *= split.parts;
      FP8_ASSIGN_OR_RETURN(std::vector<float> values, split_part(checkpoint, record, record_shape, split));
      if (!part.sharded) return t.upload<float>(values);
      const fsdp::ShardLayout layout = fsdp::shard_layout(whole, part.world_size);
      const int64_t begin = std::min(static_cast<int64_t>(part.rank) * layout.rows_per_rank, layout.rows);
      const int64_t end = begin + layout.real_rows_of(part.rank);
      std::vector<float> rows(values.begin() + begin * layout.row_elements, values.begin() + end * layout.row_elements);
      rows.resize(static_cast<size_t>(layout.shard_elements()), 0.0f);  // padding rows stay zero
      return t.upload<float>(rows);
    }
    // The rows the checkpoint holds: all of them, or all but the padding.
    TensorShape stored = whole;
    const int64_t padding = i < part.padding_rows.size() ? part.padding_rows[i] : 0;
    if (padding > 0 && !checkpoint.holds(record, whole)) stored[0] -= padding;
    if (!part.sharded) {
      FP8_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.rows(record, stored, 0, stored.at(0)));
      values.resize(static_cast<size_t>(t.numel()), 0.0f);  // the padding rows, zero
      return t.upload<float>(values);
    }
    const fsdp::ShardLayout layout = fsdp::shard_layout(whole, part.world_size);
    const int64_t begin = std::min(static_cast<int64_t>(part.rank) * layout.rows_per_rank, layout.rows);
    const int64_t end = begin + layout.real_rows_of(part.rank);
    FP8_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.rows(record, stored, std::min(begin, stored.at(0)),
                                                                    std::min(end, stored.at(0))));
    values.resize(static_cast<size_t>(layout.shard_elements()), 0.0f);  // padding rows stay zero
    return t.upload<float>(values);
  };
  return read_state(checkpoint.first(), read_part, s);
}

}  // namespace fp8::engine
