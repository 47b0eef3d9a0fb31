#include "server/coordinator/rank_amax_record.h"

#include <vector>

namespace fp8::server {

v1::RankAmaxes rank_amax_record(const std::string& layer, int operand, const RankAmax& ranks, bool open_step) {
  v1::RankAmaxes out;
  out.set_layer(layer);
  out.set_operand(static_cast<v1::AmaxHistory::Operand>(operand));
  out.set_step(ranks.step());
  out.mutable_amax()->Assign(ranks.by_rank().begin(), ranks.by_rank().end());
  for (const RankAmax::Point& p : open_step ? ranks.history() : ranks.closed()) {
    v1::RankAmaxes::Point* point = out.add_history();
    point->set_step(p.step);
    point->set_amax(p.amax);
    point->set_rank(p.rank);
  }
  return out;
}

RankAmax rank_amax_from_record(const v1::RankAmaxes& record) {
  std::vector<RankAmax::Point> closed;
  for (const v1::RankAmaxes::Point& p : record.history()) closed.push_back({p.step(), p.amax(), p.rank()});
  return RankAmax::restored(record.step(), {record.amax().begin(), record.amax().end()}, std::move(closed));
}

}  // namespace fp8::server
