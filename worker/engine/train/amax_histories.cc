#include "worker/engine/train/amax_histories.h"

#include <algorithm>
#include <map>
#include <utility>

#include "worker/engine/status_macros.h"

namespace fp8::engine {
namespace {

// One tensor's casts of one layer, folded into its record.
struct TensorTally {
  CastNumericsRecord record;
  int casts = 0;
  int64_t elements = 0, saturated = 0, underflow = 0;  // over the measured casts

  void add(const CastNumerics& c) {
    record.amax = casts == 0 ? c.amax : std::max(record.amax, c.amax);
    record.scale = casts == 0 ? c.scale : std::min(record.scale, c.scale);
    record.range_use = casts == 0 ? c.range_use : std::max(record.range_use, c.range_use);
    ++casts;
    if (!c.measured) return;
    elements += c.elements;
    saturated += c.saturated;
    underflow += c.underflow;
  }
  CastNumericsRecord finish() {
    if (elements > 0) {
      record.saturated_ratio = static_cast<float>(static_cast<double>(saturated) / static_cast<double>(elements));
      record.underflow_ratio = static_cast<float>(static_cast<double>(underflow) / static_cast<double>(elements));
    }
    return std::move(record);
  }
};

// Appends a layer's records, one per tensor in the order its casts come (input, weight,
// grad_output).
void append_layer_records(const std::string& layer, const std::vector<CastNumerics>& casts,
                          std::vector<CastNumericsRecord>& out) {
  std::vector<TensorTally> tallies;
  for (const CastNumerics& c : casts) {
    const std::string tensor = tensor_kind_name(c.tensor);
    auto it = std::find_if(tallies.begin(), tallies.end(), [&](const TensorTally& t) { return t.record.tensor == tensor; });
    if (it == tallies.end()) {
      it = tallies.insert(tallies.end(), TensorTally{});
      it->record.layer = layer;
      it->record.tensor = tensor;
    }
    it->add(c);
  }
  for (TensorTally& t : tallies) out.push_back(t.finish());
}

}  // namespace

absl::StatusOr<std::vector<AmaxHistoryRecord>> collect_amax_histories(const LlamaModel& model) {
  std::vector<AmaxHistoryRecord> out;
  for (const LinearUnit* unit : model.linears()) {
    const Float8Linear& layer = *unit->layer;
    if (layer.delayed().count() == 0) continue;
    const std::vector<std::string> names = layer.delayed().names();
    FP8_ASSIGN_OR_RETURN(const std::vector<DelayedScaling> states, layer.delayed().states());
    for (size_t i = 0; i < states.size(); ++i) {
      const DelayedScaling& d = states[i];
      out.push_back(AmaxHistoryRecord{unit->name, names[i], d.history(), d.next_scale().value_or(0.0f),
                                      d.last_range_use()});
    }
  }
  return out;
}

absl::StatusOr<int> load_amax_histories(LlamaModel& model, const std::vector<AmaxHistoryRecord>& records) {
  std::map<std::pair<std::string, std::string>, const AmaxHistoryRecord*> by_name;
  for (const AmaxHistoryRecord& r : records) by_name[{r.layer, r.cast}] = &r;
  int loaded = 0;
  for (LinearUnit* unit : model.mutable_linears()) {
    Float8Linear& layer = *unit->layer;
    const std::vector<std::string> names = layer.delayed().names();
    for (int i = 0; i < layer.delayed().count(); ++i) {
      auto it = by_name.find({unit->name, names[static_cast<size_t>(i)]});
      if (it == by_name.end()) continue;
      if (absl::Status s = layer.delayed().replay(i, it->second->history); !s.ok()) return s;
      ++loaded;
    }
  }
  return loaded;
}

void set_cast_measuring(LlamaModel& model, bool on) {
  for (LinearUnit* unit : model.mutable_linears()) unit->layer->set_measuring(on);
}

absl::StatusOr<std::vector<CastNumericsRecord>> collect_cast_numerics(LlamaModel& model) {
  std::vector<CastNumericsRecord> out;
  for (LinearUnit* unit : model.mutable_linears()) {
    FP8_ASSIGN_OR_RETURN(std::vector<CastNumerics> casts, unit->layer->numerics());
    append_layer_records(unit->name, casts, out);
  }
  return out;
}

}  // namespace fp8::engine
