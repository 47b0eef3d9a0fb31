// The launch of a by-rows kernel (row_kernels_device.cuh), shared by its launchers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/env_switch.h"
#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/row_kernels_device.cuh"

namespace fp8::cuda {
namespace {

// FP8_CUDA_WARP_ROWS=1: the kernels' WarpRows team, else BlockRows. Read at every launch
// (a getenv is nothing beside a pass over a tensor), so that bench_train times both side
// by side in one process, a recipe with it set beside one without.
inline bool warp_rows() { return env_is("FP8_CUDA_WARP_ROWS", "1"); }

// Queues a by-rows kernel over `rows`: queue(kVec, team, blocks), kVec a std::bool_constant
// (the vectorised instantiation when `vec`), team a BlockRows or WarpRows, and blocks the
// grid for that team (the kernels loop past it).
template <typename Queue>
LaunchResult launch_by_rows(int64_t rows, bool vec, const char* kernel, Queue queue) {
  const auto with_team = [&](auto team) {
    using Team = decltype(team);
    const unsigned blocks = model::clamp_grid(model::ceil_div(rows, int64_t{Team::kRowsPerBlock}),
                                              row_kernels::kMaxRowBlocks);
    if (vec) {
      queue(std::true_type{}, team, blocks);
    } else {
      queue(std::false_type{}, team, blocks);
    }
  };
  if (warp_rows()) {
    with_team(row_kernels::WarpRows{});
  } else {
    with_team(row_kernels::BlockRows{});
  }
  return model::after_launch(kernel);
}

}  // namespace
}  // namespace fp8::cuda
