// The fp8 state of a whole model as plain records: the delayed-scaling histories (what a
// trainer reports to the coordinator, and what a restarted attempt loads back from it)
// and each cast's numerics (what it reports as metrics). Names are the layer's
// ("layers.0.attention.wq") and the cast's ("input", "weight", "grad_output").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/train/train_observer.h"

namespace fp8::engine {

// Every delayed cast of every fp8 linear, in model order; empty without delayed scaling.
// Reads the histories from backend memory (one copy per layer with delayed casts).
absl::StatusOr<std::vector<AmaxHistoryRecord>> collect_amax_histories(const LlamaModel& model);

// Replays each record into the matching (layer, cast) of `model`. Returns how many
// matched; records naming no delayed cast of this model are skipped (a spec changed
// between attempts cannot be, but an old coordinator's records may name other layers).
absl::StatusOr<int> load_amax_histories(LlamaModel& model, const std::vector<AmaxHistoryRecord>& records);

// Float8Linear::set_measuring on every linear: whether the coming casts also count what
// they saturate and flush to zero.
void set_cast_measuring(LlamaModel& model, bool on);

// Each fp8 linear's cast numerics (Float8Linear::numerics()), in model order, one record
// per (layer, tensor): the series a metric exports. Axiswise recipes cast a tensor twice
// (per row for one GEMM, per column for the other); those two merge into one record with
// the larger amax and range use, the smaller scale, and ratios over both casts' values
// together (counts summed over elements summed). Casts not measured count as 0. Linears
// kept in high precision have no casts and no records. Synchronises the backend.
absl::StatusOr<std::vector<CastNumericsRecord>> collect_cast_numerics(LlamaModel& model);

}  // namespace fp8::engine
