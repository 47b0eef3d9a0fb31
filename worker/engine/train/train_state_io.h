// Everything a training run needs to continue exactly where it stopped, as checkpoint
// records (worker/engine/checkpoint):
//
//   params/<name>            f32, the parameter's shape     model weights (fp32 masters)
//   optim/exp_avg/<name>     f32, same shape                AdamW first moment
//   optim/exp_avg_sq/<name>  f32, same shape                AdamW second moment
//   optim/step               i64                            updates taken
//   fp8/<linear>/scaling     f32 [n]                        delayed-scaling histories and
//                                                           scales (delayed casts only)
//   data/epoch, data/index   i64                            where the data stream stands
//   rng/init_seed, rng/data_seed  i64 (bits of the u64)     the seeds; nothing else in the
//                                                           loop draws random numbers
//
// Metadata records the job name, model shape and fp8 recipe for people reading the file,
// and the job's model section (kModelSpecMetadata) for tools that rebuild the model from
// the checkpoint alone (fp8-model export); loading checks shapes and seeds, so a checkpoint of a different model or data order is
// refused with the record named instead of being half-loaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/checkpoint/shard_writer.h"
#include "worker/engine/data/batcher.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/train/checkpoint_rows.h"

namespace fp8::engine {

// The job's model section (v1::ModelSpec, resolved) in protobuf text format.
inline constexpr std::string_view kModelSpecMetadata = "model.spec";

// Under FSDP each rank's shard holds its own slice of every parameter and moment (the
// `params` the optimizer trains: 1-D shards named as the parameters), and its own copy of
// the rest, which is the same on every rank.
//
// Under tensor parallelism the parameter-shaped records are written whole, put together
// from every rank's parts, so that the checkpoint is one process's. Each comes from a
// WholeSource when the writer reaches it, in whole_records' order, which every rank follows
// (each record is a collective), so that the writer holds one at a time.
struct WholeRecord {
  enum Kind { kValue, kExpAvg, kExpAvgSq };
  std::string name;  // "params/…", "optim/exp_avg/…", "optim/exp_avg_sq/…"
  size_t param = 0;  // its trained parameter
  Kind kind = kValue;
};
std::vector<WholeRecord> whole_records(const ParameterSet& params);
struct WholeTensors {
  std::vector<TensorShape> shapes;  // per trained parameter, in order: its whole shape
  // The record's whole values (host).
  std::function<absl::StatusOr<std::vector<float>>(const WholeRecord&)> source;
};

struct TrainStateRefs {
  const v1::JobSpec* spec = nullptr;
  LlamaModel* model = nullptr;     // its linears' fp8 scaling state
  ParameterSet* params = nullptr;  // what the optimizer trains: the model's or FSDP's shards
  AdamW* optimizer = nullptr;
  data::Batcher* batcher = nullptr;
  // For writing only: the parameters and moments whole, instead of as `params` holds them.
  const WholeTensors* whole = nullptr;
};

absl::Status write_train_state(checkpoint::ShardWriter& w, const TrainStateRefs& state);

// Loads into the model, optimizer and batcher. On error the run must not continue from
// them: they may hold part of the checkpoint.
absl::Status read_train_state(const checkpoint::ShardReader& r, const TrainStateRefs& state);

// What one rank trains, to read a checkpoint of another world size into: under FSDP
// (`sharded`), its rows of each parameter over world_size ranks (fsdp/shard_layout.h),
// flattened and padded; else the whole parameters. full_shapes: each trained parameter's
// whole shape, in TrainStateRefs::params order.
struct RankPart {
  bool sharded = false;
  int rank = 0;
  int world_size = 1;
  std::vector<TensorShape> full_shapes;
  // Under tensor parallelism: each trained parameter's split, in the same order; the rank
  // reads its part of the whole record (full_shapes are then the parts' shapes, which FSDP
  // shards). Empty: none.
  std::vector<ParameterSplit> splits;
  // Each trained parameter's rows that only pad it (Parameter::padding_rows), in the same
  // order; empty: none. A checkpoint written before the vocabulary was padded holds such a
  // parameter and its moments without those rows: they are read as zero, as they start.
  std::vector<int64_t> padding_rows;
};

// The same from a checkpoint written at any world size: parameters and AdamW's moments are
// cut anew by rows for `part`, the rest (the same on every rank) comes from its first shard.
// The data position is the global stream's, so the windows continue with none repeated or
// skipped.
absl::Status read_train_state(const CheckpointRows& checkpoint, const TrainStateRefs& state, const RankPart& part);

}  // namespace fp8::engine
