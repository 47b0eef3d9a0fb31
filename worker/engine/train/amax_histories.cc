#include "worker/engine/train/amax_histories.h"

#include <map>
#include <utility>

namespace fp8::engine {

std::vector<AmaxHistoryRecord> CollectAmaxHistories(const LlamaModel& model) {
  std::vector<AmaxHistoryRecord> out;
  for (const LinearUnit* unit : model.linears()) {
    const Float8Linear& layer = *unit->layer;
    const std::vector<std::string> names = layer.delayed_names();
    for (int i = 0; i < layer.delayed_count(); ++i) {
      const DelayedScaling& d = layer.delayed_scaling(i);
      out.push_back(AmaxHistoryRecord{unit->name, names[static_cast<size_t>(i)], d.history(),
                                      d.next_scale().value_or(0.0f), d.last_range_use()});
    }
  }
  return out;
}

absl::StatusOr<int> LoadAmaxHistories(LlamaModel& model, const std::vector<AmaxHistoryRecord>& records) {
  std::map<std::pair<std::string, std::string>, const AmaxHistoryRecord*> by_name;
  for (const AmaxHistoryRecord& r : records) by_name[{r.layer, r.cast}] = &r;
  int loaded = 0;
  for (LinearUnit* unit : model.mutable_linears()) {
    Float8Linear& layer = *unit->layer;
    const std::vector<std::string> names = layer.delayed_names();
    for (int i = 0; i < layer.delayed_count(); ++i) {
      auto it = by_name.find({unit->name, names[static_cast<size_t>(i)]});
      if (it == by_name.end()) continue;
      if (absl::Status s = layer.replay_delayed_history(i, it->second->history); !s.ok()) return s;
      ++loaded;
    }
  }
  return loaded;
}

}  // namespace fp8::engine
