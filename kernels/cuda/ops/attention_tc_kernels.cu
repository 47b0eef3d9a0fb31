// Causal grouped-query attention on the tensor cores (attention_tc_kernels.h): when it
// applies, and the launchers of the mma.sync kernels (attention_mma_device.cuh).
#include "cuda/ops/attention_tc_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/attention_mma_device.cuh"
#include "cuda/ops/attention_tc_geometry.h"
#include "cuda/ops/attention_wgmma_kernels.h"
#include "cuda/ops/side_stream.h"

namespace fp8::cuda {

bool tensor_core_attention_applies(const AttentionLaunch& d, HpType act, std::initializer_list<const void*> pointers) {
  if (act != HpType::kBFloat16 || (d.head_dim != 64 && d.head_dim != 128) ||
      d.kernels == AttentionKernels::kSimt) {
    return false;
  }
  for (const void* p : pointers) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  return major >= 8;  // bf16 mma.sync and cp.async
}

LaunchResult launch_attention_forward_tc(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                          void* out, float* lse, float* row_amax, cudaStream_t stream) {
  using namespace attention_tc;
  using namespace attention_mma;
  if (row_amax != nullptr) {
    // The blocks of a row's heads combine their amaxes with atomicMax onto zeros.
    const size_t bytes = static_cast<size_t>(d.batch * d.seq) * sizeof(float);
    if (const cudaError_t e = cudaMemsetAsync(row_amax, 0, bytes, stream); e != cudaSuccess) {
      return {e, "cudaMemsetAsync (attention row amaxes)"};
    }
  }
  if (wgmma_attention_applies(d)) return launch_attention_forward_wgmma(d, q, k, v, out, lse, row_amax, stream);
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    Geometry g{};
    unsigned blocks = 0;
    if (!make_geometry(d, d.batch * d.n_heads, &g, &blocks)) return kTooLarge;
    const LaunchResult r = allow_shared_memory(attention_forward_mma_kernel<D>, kForwardBytes<D>,
                                               "cudaFuncSetAttribute (mma attention forward kernel)");
    if (!r.ok()) return r;
    attention_forward_mma_kernel<D><<<blocks, kThreads, kForwardBytes<D>, stream>>>(
        g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
        static_cast<uint16_t*>(out), lse, row_amax);
    return after_launch("mma attention forward kernel");
  });
}

// grad_kv on the caller's stream, grad_q beside it on a side stream: grad_kv's grid is the
// smaller and its blocks the more unequal (the first key tiles see every query), so one
// after the other leaves SMs idle in its last wave; side by side, grad_q's blocks fill
// them. The two write disjoint outputs, so the results do not depend on the overlap.
LaunchResult launch_attention_backward_tc(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                           const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                           void* grad_k, void* grad_v, cudaStream_t stream) {
  using namespace attention_tc;
  using namespace attention_mma;
  const auto* qa = static_cast<const uint16_t*>(q);
  const auto* ka = static_cast<const uint16_t*>(k);
  const auto* va = static_cast<const uint16_t*>(v);
  const auto* go = static_cast<const uint16_t*>(grad_out);
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    Geometry kv{}, qg{};
    unsigned kv_blocks = 0, q_blocks = 0;
    if (!make_geometry(d, d.batch * d.n_kv_heads, &kv, &kv_blocks) ||
        !make_geometry(d, d.batch * d.n_heads, &qg, &q_blocks)) {
      return kTooLarge;
    }
    LaunchResult r = allow_shared_memory(attention_grad_kv_mma_kernel<D>, kGradKvBytes<D>,
                                         "cudaFuncSetAttribute (mma attention grad_kv kernel)");
    if (!r.ok()) return r;
    if (r = allow_shared_memory(attention_grad_q_mma_kernel<D>, kGradQBytes<D>,
                                "cudaFuncSetAttribute (mma attention grad_q kernel)");
        !r.ok()) {
      return r;
    }
    SideStream* side = nullptr;
    if (r = side_stream(&side); !r.ok()) return r;
    if (r = side->fork(stream); !r.ok()) return r;
    if (wgmma_attention_applies(d)) {
      if (r = launch_attention_grad_kv_wgmma(d, q, k, v, lse, delta, grad_out, grad_k, grad_v, stream); !r.ok()) {
        return r;
      }
      if (r = launch_attention_grad_q_wgmma(d, q, k, v, lse, delta, grad_out, grad_q, side->stream()); !r.ok()) {
        return r;
      }
      return side->join(stream);
    }
    attention_grad_kv_mma_kernel<D><<<kv_blocks, kThreads, kGradKvBytes<D>, stream>>>(
        kv, qa, ka, va, lse, delta, go, static_cast<uint16_t*>(grad_k), static_cast<uint16_t*>(grad_v));
    if (r = after_launch("mma attention grad_kv kernel"); !r.ok()) return r;
    attention_grad_q_mma_kernel<D><<<q_blocks, kThreads, kGradQBytes<D>, side->stream()>>>(
        qg, qa, ka, va, lse, delta, go, static_cast<uint16_t*>(grad_q));
    if (r = after_launch("mma attention grad_q kernel"); !r.ok()) return r;
    return side->join(stream);
  });
}

}  // namespace fp8::cuda
