// The elementwise model ops: residual add and accumulate, scale, SwiGLU and its backward,
// the AdamW step. One grid-stride kernel template maps a per-element function of
// ops/model_arith.h (the CPU's own) over K input and M output streams; the variants that
// also write each row's amax run by rows (row_kernels_device.cuh).
//
// Bit-identical to the CPU: this file is compiled with -fmad=false (kernels/ops/
// CMakeLists.txt), so a * b + c stays two rounded operations as on the host, and the
// functions are the same; only expf (SwiGLU) differs, CUDA's being within 2 ulp.
//
// The activation ops (add, accumulate, SwiGLU) take fp32 or bf16 streams (the element type
// T); scale and AdamW are fp32. bf16 elements are widened on load and each output rounded
// once on store (activation_access.cuh), so add and accumulate in bf16 are bit-identical
// to the CPU's bf16 path too.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/row_kernels_device.cuh"
#include "ops/model_arith.h"

namespace fp8::cuda {
namespace {

using model::kThreads;

// Enough blocks to fill any current GPU many times over; larger tensors loop (grid-stride).
constexpr int64_t kMaxBlocks = int64_t{1} << 15;

template <typename T, int K, int M>
struct Streams {
  const T* in[K];
  T* out[M];
};

// Outputs may alias inputs (in-place updates), hence no __restrict__ and no read-only
// cache loads: each element's inputs are all loaded before its outputs are stored, by the
// one thread that owns it.
template <typename Fn, typename T, int K, int M>
__device__ __forceinline__ void map_one(const Fn& fn, const Streams<T, K, M>& s, int64_t i) {
  float x[K];
  float y[M];
#pragma unroll
  for (int k = 0; k < K; ++k) x[k] = model::load_act(s.in[k] + i);
  fn(x, y);
#pragma unroll
  for (int m = 0; m < M; ++m) model::store_act(s.out[m] + i, y[m]);
}

// kVec: every stream is 16-byte aligned, so groups of 16 bytes (4 fp32 or 8 bf16) move as
// one access each; the tail past the last whole group goes element by element.
template <typename Fn, typename T, int K, int M, bool kVec>
__global__ void __launch_bounds__(kThreads) map_kernel(Fn fn, Streams<T, K, M> s, int64_t n) {
  constexpr int kGroup = model::kPer16Bytes<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail_begin = 0;
  if constexpr (kVec) {
    const int64_t groups = n / kGroup;
    for (int64_t g = first; g < groups; g += stride) {
      float xs[K][kGroup];
#pragma unroll
      for (int k = 0; k < K; ++k) model::load16(s.in[k] + g * kGroup, xs[k]);
      float ys[M][kGroup];
#pragma unroll
      for (int lane = 0; lane < kGroup; ++lane) {
        float x[K];
        float y[M];
#pragma unroll
        for (int k = 0; k < K; ++k) x[k] = xs[k][lane];
        fn(x, y);
#pragma unroll
        for (int m = 0; m < M; ++m) ys[m][lane] = y[m];
      }
#pragma unroll
      for (int m = 0; m < M; ++m) model::store16(s.out[m] + g * kGroup, ys[m]);
    }
    tail_begin = groups * kGroup;
  }
  for (int64_t i = tail_begin + first; i < n; i += stride) map_one(fn, s, i);
}

template <typename Fn, typename T, int K, int M>
LaunchResult launch_map(const Fn& fn, const Streams<T, K, M>& s, int64_t n, cudaStream_t stream, const char* name) {
  if (n <= 0) return {};
  constexpr int kGroup = model::kPer16Bytes<T>;
  bool vec = true;
  for (int k = 0; k < K; ++k) vec = vec && model::aligned16(s.in[k]);
  for (int m = 0; m < M; ++m) vec = vec && model::aligned16(s.out[m]);
  const int64_t work = vec ? (n / kGroup > 0 ? n / kGroup : n) : n;
  const unsigned blocks = model::clamp_grid(model::ceil_div(work, kThreads), kMaxBlocks);
  if (vec) {
    map_kernel<Fn, T, K, M, true><<<blocks, kThreads, 0, stream>>>(fn, s, n);
  } else {
    map_kernel<Fn, T, K, M, false><<<blocks, kThreads, 0, stream>>>(fn, s, n);
  }
  return model::after_launch(name);
}

// The activation streams of one call, typed: void pointers cast to T's.
template <typename T, int K, int M>
Streams<T, K, M> typed(const void* const (&in)[K], void* const (&out)[M]) {
  Streams<T, K, M> s;
  for (int k = 0; k < K; ++k) s.in[k] = static_cast<const T*>(in[k]);
  for (int m = 0; m < M; ++m) s.out[m] = static_cast<T*>(out[m]);
  return s;
}

// launch_map over activations of type `act`.
template <typename Fn, int K, int M>
LaunchResult launch_act_map(const Fn& fn, HpType act, const void* const (&in)[K], void* const (&out)[M], int64_t n,
                            cudaStream_t stream, const char* name) {
  return model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    return launch_map(fn, typed<T>(in, out), n, stream, name);
  });
}

// The by-rows kernels (with the rows' amaxes) are row_kernels_device.cuh's.
using row_kernels::kMaxRowBlocks;

// ---- the per-element functions -------------------------------------------------------------

struct AddFn {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const { y[0] = x[0] + x[1]; }
};

// in = {y, x}: y + x, the CPU's y[i] += x[i].
struct AccumulateFn {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const { y[0] = x[0] + x[1]; }
};

struct SwigluFn {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const { y[0] = ops::swiglu(x[0], x[1]); }
};

struct SwigluGradFn {
  __device__ void operator()(const float (&x)[3], float (&y)[2]) const {
    ops::swiglu_grad(x[0], x[1], x[2], &y[0], &y[1]);
  }
};

// in = {param, grad, m, v}, out = {param, m, v}. scale_in: the gradients' factor from
// device memory instead of c.grad_scale (NaN: no update), or null.
struct AdamWFn {
  ops::AdamWCoefficients c;
  const float* scale_in;
  __device__ void operator()(const float (&x)[4], float (&y)[3]) const {
    float param = x[0], m = x[2], v = x[3];
    ops::AdamWCoefficients k = c;
    if (scale_in != nullptr) k.grad_scale = __ldg(scale_in);
    if (k.grad_scale == k.grad_scale) ops::adamw_update(k, x[1], &param, &m, &v);  // NaN: no update
    y[0] = param;
    y[1] = m;
    y[2] = v;
  }
};

}  // namespace

LaunchResult launch_add(const void* a, const void* b, int64_t n, void* out, HpType act, cudaStream_t stream) {
  return launch_act_map(AddFn{}, act, {a, b}, {out}, n, stream, "add kernel");
}

LaunchResult launch_accumulate(const void* x, int64_t n, void* y, HpType act, cudaStream_t stream) {
  return launch_act_map(AccumulateFn{}, act, {y, x}, {y}, n, stream, "accumulate kernel");
}

LaunchResult launch_swiglu_forward(const void* gate, const void* up, int64_t n, void* out, HpType act,
                                   cudaStream_t stream) {
  return launch_act_map(SwigluFn{}, act, {gate, up}, {out}, n, stream, "swiglu forward kernel");
}

// The launch of a by-rows kernel: one block per row (the kernels loop past the grid), the
// vectorised instantiation when `vec`. queue(kVec, blocks) queues the kernel, kVec as a
// std::bool_constant.
template <typename Queue>
LaunchResult launch_by_rows(int64_t rows, bool vec, const char* kernel, Queue queue) {
  const unsigned blocks = model::clamp_grid(rows, kMaxRowBlocks);
  if (vec) {
    queue(std::true_type{}, blocks);
  } else {
    queue(std::false_type{}, blocks);
  }
  return model::after_launch(kernel);
}

LaunchResult launch_row_amax(const void* x, int64_t rows, int64_t cols, float* row_amax, HpType act,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return {};
  return model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x);
    const bool vec = cols % model::kPer16Bytes<T> == 0 && model::aligned16(in);
    return launch_by_rows(rows, vec, "row amax kernel", [&](auto kvec, unsigned blocks) {
      row_kernels::row_amax_kernel<T, decltype(kvec)::value><<<blocks, kThreads, 0, stream>>>(in, rows, cols, row_amax);
    });
  });
}

LaunchResult launch_swiglu_forward_rows(const void* gate, const void* up, int64_t rows, int64_t cols, void* out,
                                        float* row_amax, HpType act, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return {};
  return model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    T* y = static_cast<T*>(out);
    const bool vec = cols % model::kPer16Bytes<T> == 0 && model::aligned16(g) && model::aligned16(u) &&
                     model::aligned16(y);
    return launch_by_rows(rows, vec, "swiglu rows kernel", [&](auto kvec, unsigned blocks) {
      row_kernels::swiglu_rows_kernel<T, decltype(kvec)::value>
          <<<blocks, kThreads, 0, stream>>>(g, u, rows, cols, y, row_amax);
    });
  });
}

LaunchResult launch_swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                                    void* grad_up, HpType act, cudaStream_t stream) {
  return launch_act_map(SwigluGradFn{}, act, {gate, up, grad_out}, {grad_gate, grad_up}, n, stream,
                        "swiglu backward kernel");
}

LaunchResult launch_swiglu_backward_rows(const void* gate, const void* up, const void* grad_out, int64_t rows,
                                         int64_t cols, void* grad_gate, void* grad_up, float* grad_gate_row_amax,
                                         float* grad_up_row_amax, HpType act, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return {};
  return model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    const T* d = static_cast<const T*>(grad_out);
    T* dg = static_cast<T*>(grad_gate);
    T* du = static_cast<T*>(grad_up);
    const bool vec = cols % model::kPer16Bytes<T> == 0 && model::aligned16(g) && model::aligned16(u) &&
                     model::aligned16(d) && model::aligned16(dg) && model::aligned16(du);
    return launch_by_rows(rows, vec, "swiglu backward rows kernel", [&](auto kvec, unsigned blocks) {
      row_kernels::swiglu_backward_rows_kernel<T, decltype(kvec)::value>
          <<<blocks, kThreads, 0, stream>>>(g, u, d, rows, cols, dg, du, grad_gate_row_amax, grad_up_row_amax);
    });
  });
}

LaunchResult launch_adamw(const ops::AdamWCoefficients& c, const float* grad_scale_in, float* param, const float* grad,
                          float* m, float* v, int64_t n, cudaStream_t stream) {
  return launch_map(AdamWFn{c, grad_scale_in}, Streams<float, 4, 3>{{param, grad, m, v}, {param, m, v}}, n, stream,
                    "adamw kernel");
}

LaunchResult launch_adamw_rows(const ops::AdamWCoefficients& c, const float* grad_scale_in, float* param,
                               const float* grad, float* m, float* v, int64_t rows, int64_t cols,
                               float* param_row_amax, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return {};
  const bool vec = cols % 4 == 0 && model::aligned16(param) && model::aligned16(grad) && model::aligned16(m) &&
                   model::aligned16(v);
  return launch_by_rows(rows, vec, "adamw rows kernel", [&](auto kvec, unsigned blocks) {
    row_kernels::adamw_rows_kernel<decltype(kvec)::value>
        <<<blocks, kThreads, 0, stream>>>(c, grad_scale_in, param, grad, m, v, rows, cols, param_row_amax);
  });
}

cudaError_t probe_model_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, map_kernel<AddFn, float, 2, 1, false>);
}

}  // namespace fp8::cuda
