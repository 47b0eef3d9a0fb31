// A Float8LinearObserver that counts what the layer tells it, for tests to check
// (Float8Linear::set_observer).
#pragma once

#include <cstdint>

#include "worker/engine/float8/linear.h"

namespace fp8::engine::float8_test {

struct CastCounts : Float8LinearObserver {
  int64_t shared_input_casts = 0;
  int64_t row_amax_casts = 0;
  int64_t tensors_cast_both_ways = 0;

  void on_shared_input_cast() override { ++shared_input_casts; }
  void on_row_amax_cast() override { ++row_amax_casts; }
  void on_cast_both_ways() override { ++tensors_cast_both_ways; }
};

}  // namespace fp8::engine::float8_test
