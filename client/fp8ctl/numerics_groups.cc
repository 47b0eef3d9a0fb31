#include "client/fp8ctl/numerics_groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/inspect.h"
#include "client/fp8ctl/table.h"

namespace fp8::ctl {

bool NumericsGroups::add(const v1::JobEvent& event) {
  if (!event.has_numerics()) return false;
  const v1::NumericsEvent& n = event.numerics();
  ++events_;
  const auto key = std::make_tuple(static_cast<int>(n.kind()), n.layer(), static_cast<int>(n.operand()));
  auto [it, fresh] = index_.emplace(key, groups_.size());
  if (fresh) {
    NumericsGroup g;
    g.kind = n.kind();
    g.layer = n.layer();
    g.operand = n.operand();
    g.first_step = g.last_step = n.step();
    groups_.push_back(std::move(g));
  }
  NumericsGroup& g = groups_[it->second];
  ++g.count;
  g.first_step = std::min(g.first_step, n.step());
  g.last_step = std::max(g.last_step, n.step());
  g.last = n;
  return fresh;
}

std::string numerics_kind_name(v1::NumericsEvent::Kind kind) {
  if (kind == v1::NumericsEvent::KIND_UNSPECIFIED) return "UNKNOWN";
  return v1::NumericsEvent::Kind_Name(kind);
}

std::string group_name(const NumericsGroup& g) {
  std::string out = numerics_kind_name(g.kind);
  if (!g.layer.empty()) absl::StrAppend(&out, " ", g.layer);
  if (g.operand != v1::AmaxHistory::OPERAND_UNSPECIFIED) absl::StrAppend(&out, " ", operand_name(g.operand));
  return out;
}

std::string step_span(const NumericsGroup& g) {
  return g.first_step == g.last_step ? absl::StrCat("step ", g.first_step)
                                     : absl::StrCat("steps ", g.first_step, "-", g.last_step);
}

std::string numerics_events_table(const std::vector<v1::JobEvent>& events) {
  Table t({"TIME", "ATTEMPT", "STEP", "KIND", "LAYER", "OPERAND", "VALUE", "THRESHOLD", "MESSAGE"});
  for (const v1::JobEvent& e : events) {
    if (!e.has_numerics()) continue;
    const v1::NumericsEvent& n = e.numerics();
    t.add_row({local_time(e.time_unix_ms()), absl::StrCat(n.attempt()), absl::StrCat(n.step()), numerics_kind_name(n.kind()),
              n.layer().empty() ? "-" : n.layer(), operand_name(n.operand()), absl::StrFormat("%.4g", n.value()),
              absl::StrFormat("%.4g", n.threshold()), n.message()});
  }
  return t.render();
}

}  // namespace fp8::ctl
