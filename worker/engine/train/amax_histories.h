// The delayed-scaling state of a whole model as plain records: what a trainer reports to
// the coordinator, and what a restarted attempt loads back from it. Names are the
// layer's ("layers.0.attention.wq") and the cast's ("input", "weight", "grad_output").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/train/train_observer.h"

namespace fp8::engine {

// Every delayed cast of every fp8 linear, in model order; empty without delayed scaling.
std::vector<AmaxHistoryRecord> CollectAmaxHistories(const LlamaModel& model);

// Replays each record into the matching (layer, cast) of `model`. Returns how many
// matched; records naming no delayed cast of this model are skipped (a spec changed
// between attempts cannot be, but an old coordinator's records may name other layers).
absl::StatusOr<int> LoadAmaxHistories(LlamaModel& model, const std::vector<AmaxHistoryRecord>& records);

}  // namespace fp8::engine
