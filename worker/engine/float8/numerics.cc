// Float8Linear's numerics: what each cast did (amax, scale, range use, and the values it
// saturated or flushed while measuring), read for the metrics. State is linear_state.h's.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "worker/engine/float8/linear_state.h"

namespace fp8::engine {

// ---- numerics ---------------------------------------------------------------------------------

absl::StatusOr<std::vector<CastNumerics>> Float8Linear::numerics() {
  State& s = *s_;
  // What each cast's report needs (its amaxes, the scales it used, its range counts) is
  // gathered in backend memory first and read in one copy: on a GPU one wait for the
  // layer rather than two or three for each of its casts.
  struct Piece {
    const CastPlan* plan;
    int64_t n;  // amaxes and scales
    size_t amax_at, scale_at, counts_at;
  };
  std::vector<Piece> pieces;
  size_t bytes = 0;
  for (const CastPlan& p : s.plans) {
    if (p.in_use.rows == 0) continue;
    Piece piece{&p, scale_count(p.granularity, p.in_use.rows, p.in_use.cols), 0, 0, 0};
    piece.amax_at = bytes;
    bytes += float_bytes(piece.n);
    piece.scale_at = bytes;
    bytes += float_bytes(piece.n);
    piece.counts_at = bytes;
    if (p.range_counted) bytes += sizeof(CastRangeCounts);
    pieces.push_back(piece);
  }
  if (pieces.empty()) return std::vector<CastNumerics>();
  if (auto st = s.numerics_staging.reserve(bytes); !st.ok()) return st;
  auto* staging = s.numerics_staging.as<std::byte>();
  for (const Piece& piece : pieces) {
    const CastPlan& p = *piece.plan;
    const float* amax_src =
        p.last_amax_row >= 0 ? s.slots_of(p.tensor).at(p.last_amax_row, p.delayed_column) : p.in_use.amax;
    absl::Status queued = s.backend.copy(staging + piece.amax_at, amax_src, float_bytes(piece.n));
    if (queued.ok()) queued = s.backend.copy(staging + piece.scale_at, p.in_use.scale, float_bytes(piece.n));
    if (queued.ok() && p.range_counted) {
      queued = s.backend.copy(staging + piece.counts_at, p.holder().range_counts.as<void>(), sizeof(CastRangeCounts));
    }
    if (!queued.ok()) return queued;
  }
  std::vector<std::byte> host(bytes);
  if (auto st = s.backend.copy_to_host(host.data(), staging, bytes); !st.ok()) return st;

  std::vector<CastNumerics> out;
  for (const Piece& piece : pieces) {
    const CastPlan& p = *piece.plan;
    std::vector<float> amax(static_cast<size_t>(piece.n)), scale(static_cast<size_t>(piece.n));
    std::memcpy(amax.data(), host.data() + piece.amax_at, float_bytes(piece.n));
    std::memcpy(scale.data(), host.data() + piece.scale_at, float_bytes(piece.n));
    CastNumerics c;
    c.tensor = p.tensor;
    c.gemms = p.gemms;
    c.config = p.config;
    c.amax = *std::max_element(amax.begin(), amax.end());
    c.scale = *std::min_element(scale.begin(), scale.end());
    float use = 0.0f;
    for (size_t i = 0; i < amax.size(); ++i) use = std::max(use, amax[i] * scale[i]);
    c.range_use = use / fp8_max(p.config.format());
    if (p.range_counted) {
      CastRangeCounts counts;
      std::memcpy(&counts, host.data() + piece.counts_at, sizeof counts);
      c.measured = true;
      c.elements = p.in_use.rows * p.in_use.cols;
      c.saturated = static_cast<int64_t>(counts.saturated);
      c.underflow = static_cast<int64_t>(counts.underflow);
      c.saturated_ratio = static_cast<float>(static_cast<double>(c.saturated) / static_cast<double>(c.elements));
      c.underflow_ratio = static_cast<float>(static_cast<double>(c.underflow) / static_cast<double>(c.elements));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void Float8Linear::set_measuring(bool on) { s_->measuring = on; }

}  // namespace fp8::engine
