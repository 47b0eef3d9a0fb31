// The launchers of the sum-of-squares kernels (sum_of_squares_device.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/ops/model_kernels.h"
#include "cuda/ops/sum_of_squares_device.cuh"

namespace fp8::cuda {

using squares::partial_count;
using squares::SquaresTable;

size_t sum_of_squares_scratch_bytes(int64_t n) {
  model::ScratchCarver carve(nullptr);
  carve.take<double>(static_cast<size_t>(partial_count(n)));
  return carve.used();
}

LaunchResult launch_sum_of_squares(const float* x, int64_t n, double* result, void* scratch, cudaStream_t stream) {
  if (n <= 0) {
    const cudaError_t e = cudaMemsetAsync(result, 0, sizeof(double), stream);
    return {e, e == cudaSuccess ? nullptr : "cudaMemsetAsync"};
  }
  model::ScratchCarver carve(scratch);
  double* partial = carve.take<double>(static_cast<size_t>(partial_count(n)));
  const auto blocks = static_cast<unsigned>(partial_count(n));
  if (model::aligned16(x)) {
    squares::partial_sum_of_squares_kernel<true><<<blocks, model::kThreads, 0, stream>>>(x, n, partial);
  } else {
    squares::partial_sum_of_squares_kernel<false><<<blocks, model::kThreads, 0, stream>>>(x, n, partial);
  }
  if (auto r = model::after_launch("sum_of_squares kernel"); !r.ok()) return r;
  squares::combine_partials_kernel<<<1, model::kThreads, 0, stream>>>(partial, blocks, result);
  return model::after_launch("sum_of_squares combine kernel");
}

namespace {

// The partials of the table with the most: the scratch holds one table's at a time.
size_t most_partials(const int64_t* ns, int count) {
  int64_t most = 0;
  for (int first = 0; first < count; first += SquaresTable::kMax) {
    int64_t blocks = 0;
    for (int i = first; i < std::min(count, first + SquaresTable::kMax); ++i) blocks += partial_count(ns[i]);
    most = std::max(most, blocks);
  }
  return static_cast<size_t>(most);
}

size_t sums_of_squares_scratch_bytes(const int64_t* ns, int count) {
  model::ScratchCarver carve(nullptr);
  carve.take<double>(most_partials(ns, count));
  return carve.used();
}

// results[i] = Σ xs[i]², each the double launch_sum_of_squares gives, in two launches per
// table of 64 buffers; scratch: sums_of_squares_scratch_bytes() of the same buffers.
LaunchResult launch_sums_of_squares(const float* const* xs, const int64_t* ns, int count, double* results,
                                    void* scratch, cudaStream_t stream) {
  model::ScratchCarver carve(scratch);
  double* partials = carve.take<double>(most_partials(ns, count));
  // Each table's combine has read the partials before the next table's partial kernel
  // writes them: one stream.
  for (int first = 0; first < count; first += SquaresTable::kMax) {
    const SquaresTable t = squares::make_table(xs, ns, first, count);
    const int64_t blocks = t.first_block[t.count];
    if (blocks > 0) {
      squares::many_partial_sums_kernel<<<static_cast<unsigned>(blocks), model::kThreads, 0, stream>>>(t, partials);
      if (auto r = model::after_launch("sums_of_squares kernel"); !r.ok()) return r;
    }
    squares::many_combine_kernel<<<static_cast<unsigned>(t.count), model::kThreads, 0, stream>>>(t, partials,
                                                                                               results + first);
    if (auto r = model::after_launch("sums_of_squares combine kernel"); !r.ok()) return r;
  }
  return {};
}

}  // namespace

size_t grad_norm_scratch_bytes(const int64_t* ns, int count) {
  model::ScratchCarver carve(nullptr);
  carve.take<double>(static_cast<size_t>(count));
  carve.take<char>(sums_of_squares_scratch_bytes(ns, count));
  return carve.used();
}

LaunchResult launch_grad_norm(const float* const* xs, const int64_t* ns, int count, double max_norm,
                              double* sum_of_squares, float* clip_scale, void* scratch, cudaStream_t stream) {
  model::ScratchCarver carve(scratch);
  double* sums = carve.take<double>(static_cast<size_t>(count));
  void* rest = carve.take<char>(sums_of_squares_scratch_bytes(ns, count));
  if (auto r = launch_sums_of_squares(xs, ns, count, sums, rest, stream); !r.ok()) return r;
  squares::grad_norm_finish_kernel<<<1, 32, 0, stream>>>(sums, count, max_norm, sum_of_squares, clip_scale);
  return model::after_launch("grad norm finish kernel");
}

LaunchResult launch_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale,
                               cudaStream_t stream) {
  squares::clip_scale_kernel<<<1, 32, 0, stream>>>(sum_of_squares, max_norm, clip_scale);
  return model::after_launch("clip scale kernel");
}

}  // namespace fp8::cuda
