// The cos/sin tables of rotary position embedding, and a small cache of them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace fp8::ops {

// cos and sin of pos * theta^(-2i / head_dim) for pos in [0, seq), i in [0, head_dim / 2),
// stored [seq, head_dim / 2]. Angles are computed in double and rounded once to float:
// at position 100k an fp32 angle would already be off by ~0.004 rad.
class RopeTable {
 public:
  RopeTable(int64_t seq, int64_t head_dim, double theta);

  int64_t seq() const { return seq_; }
  int64_t head_dim() const { return head_dim_; }
  double theta() const { return theta_; }
  // The head_dim / 2 cosines (sines) of position `pos`.
  const float* cos_row(int64_t pos) const { return cos_.data() + pos * (head_dim_ / 2); }
  const float* sin_row(int64_t pos) const { return sin_.data() + pos * (head_dim_ / 2); }

 private:
  int64_t seq_;
  int64_t head_dim_;
  double theta_;
  std::vector<float> cos_;
  std::vector<float> sin_;
};

// The most positions a rotation may reach (RopeShape::start + seq): bounds the table a
// call can make an implementation build.
inline constexpr int64_t kMaxRopePositions = int64_t{1} << 20;

// The rows of the table that serves positions [start, start + seq): seq when start is 0
// (training's tables, exactly as long as its sequences), else start + seq rounded up to a
// power of two, so that a generation step at each next position finds a table already
// made instead of building one per position. A row's values do not depend on the table's
// length.
inline int64_t rope_table_rows(int64_t start, int64_t seq) {
  if (start == 0) return seq;
  int64_t rows = 1;
  while (rows < start + seq) rows *= 2;
  return rows;
}

// Tables keyed by (seq, head_dim, theta), built on first use. A model asks for the same
// one or two keys every step, so recomputing the transcendental functions per call would
// be waste. Thread-safe; entries are shared_ptr so that clearing a full cache never pulls
// a table from under a running call.
class RopeTableCache {
 public:
  std::shared_ptr<const RopeTable> get(int64_t seq, int64_t head_dim, double theta);

 private:
  // More distinct keys than this means shapes are changing call to call; start over
  // rather than grow without bound.
  static constexpr size_t kMaxEntries = 16;

  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, double>, std::shared_ptr<const RopeTable>> tables_;
};

}  // namespace fp8::ops
