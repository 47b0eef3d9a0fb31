// The launchers of the wgmma attention kernels (attention_wgmma_kernels.h).
#include "cuda/ops/attention_wgmma_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/attention_tc_geometry.h"
#include "cuda/ops/attention_wgmma_device.cuh"

namespace fp8::cuda {

bool wgmma_attention_applies(const AttentionLaunch& d) {
  if (d.kernels != AttentionKernels::kTensorCores || (d.head_dim != 64 && d.head_dim != 128)) return false;
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}


LaunchResult launch_attention_forward_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                            void* out, float* lse, float* row_amax, cudaStream_t stream) {
  using namespace attention_tc;
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    constexpr auto kernel = attention_wgmma::attention_forward_wgmma_kernel<D>;
    constexpr size_t bytes = attention_wgmma::kForwardBytes<D>;
    const wgmma::MnMajorOffsets mn{};  // the reading fp8_wgmma_probe_test checks
    Geometry g{};
    unsigned blocks = 0;
    if (!make_geometry(d, d.batch * d.n_heads, &g, &blocks)) return kTooLarge;
    const LaunchResult r =
        allow_shared_memory(kernel, bytes, "cudaFuncSetAttribute (wgmma attention forward kernel)");
    if (!r.ok()) return r;
    kernel<<<blocks, attention_wgmma::kThreads, bytes, stream>>>(
        g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
        static_cast<uint16_t*>(out), lse, row_amax, mn);
    return after_launch("wgmma attention forward kernel");
  });
}

LaunchResult launch_attention_grad_kv_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                            const float* lse, const float* delta, const void* grad_out,
                                            void* grad_k, void* grad_v, cudaStream_t stream) {
  using namespace attention_tc;
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    constexpr auto kernel = attention_wgmma::attention_grad_kv_wgmma_kernel<D>;
    constexpr size_t bytes = attention_wgmma::kGradKvBytes<D>;
    const wgmma::MnMajorOffsets mn{};  // the reading fp8_wgmma_probe_test checks
    Geometry g{};
    unsigned blocks = 0;
    if (!make_geometry(d, d.batch * d.n_kv_heads, &g, &blocks)) return kTooLarge;
    const LaunchResult r =
        allow_shared_memory(kernel, bytes, "cudaFuncSetAttribute (wgmma attention grad_kv kernel)");
    if (!r.ok()) return r;
    kernel<<<blocks, attention_wgmma::kThreads, bytes, stream>>>(
        g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), lse,
        delta, static_cast<const uint16_t*>(grad_out), static_cast<uint16_t*>(grad_k),
        static_cast<uint16_t*>(grad_v), mn);
    return after_launch("wgmma attention grad_kv kernel");
  });
}

LaunchResult launch_attention_grad_q_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                           const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                           cudaStream_t stream) {
  using namespace attention_tc;
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    constexpr auto kernel = attention_wgmma::attention_grad_q_wgmma_kernel<D>;
    constexpr size_t bytes = attention_wgmma::kGradQBytes<D>;
    const wgmma::MnMajorOffsets mn{};  // the reading fp8_wgmma_probe_test checks
    Geometry g{};
    unsigned blocks = 0;
    if (!make_geometry(d, d.batch * d.n_heads, &g, &blocks)) return kTooLarge;
    const LaunchResult r = allow_shared_memory(kernel, bytes, "cudaFuncSetAttribute (wgmma attention grad_q kernel)");
    if (!r.ok()) return r;
    kernel<<<blocks, attention_wgmma::kThreads, bytes, stream>>>(
        g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), lse,
        delta, static_cast<const uint16_t*>(grad_out), static_cast<uint16_t*>(grad_q), mn);
    return after_launch("wgmma attention grad_q kernel");
  });
}

}  // namespace fp8::cuda
