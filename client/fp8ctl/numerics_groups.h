// A job's numerics events grouped by kind, layer and operand, so that a cast saturating at
// every step reads as one line with a count rather than one line per step (`follow`,
// `describe`), and the table of `fp8ctl events ID`, which lists each. Pure, so the unit
// test pins it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

struct NumericsGroup {
  v1::NumericsEvent::Kind kind = v1::NumericsEvent::KIND_UNSPECIFIED;
  std::string layer;
  v1::AmaxHistory::Operand operand = v1::AmaxHistory::OPERAND_UNSPECIFIED;
  int64_t count = 0;
  int64_t first_step = 0, last_step = 0;
  v1::NumericsEvent last;  // the newest event of the group
};

class NumericsGroups {
 public:
  // Counts `event` into its group; true when it opened a new one (its first event). Other
  // events than numerics are ignored (false).
  bool add(const v1::JobEvent& event);
  // In the order each group's first event came.
  const std::vector<NumericsGroup>& groups() const { return groups_; }
  int64_t events() const { return events_; }

 private:
  std::map<std::tuple<int, std::string, int>, size_t> index_;
  std::vector<NumericsGroup> groups_;
  int64_t events_ = 0;
};

// "SATURATION", "AMAX_JUMP", ...
std::string numerics_kind_name(v1::NumericsEvent::Kind kind);
// "steps 5-60" or "step 5".
std::string step_span(const NumericsGroup& g);
// "SATURATION layers.0.attention.wq input" (the layer and operand left out when empty).
std::string group_name(const NumericsGroup& g);

// `fp8ctl events`: TIME, ATTEMPT, STEP, KIND, LAYER, OPERAND, VALUE, THRESHOLD, MESSAGE,
// one line per numerics event (other events are skipped).
std::string numerics_events_table(const std::vector<v1::JobEvent>& events);

}  // namespace fp8::ctl
