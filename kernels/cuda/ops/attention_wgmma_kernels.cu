// The launcher of the wgmma attention forward (attention_wgmma_kernels.h).
#include "cuda/ops/attention_wgmma_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/ops/attention_tc_geometry.h"
#include "cuda/ops/attention_wgmma_device.cuh"

namespace fp8::cuda {

bool wgmma_attention_forward_applies(const AttentionDims& d) {
  const char* e = std::getenv("FP8_CUDA_ATTENTION");  // read per call, as the other switches
  if (e == nullptr || std::strcmp(e, "wgmma") != 0 || d.head_dim != attention_wgmma::kD) return false;
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}

LaunchResult launch_attention_forward_wgmma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                            void* out, float* lse, float* row_amax, cudaStream_t stream) {
  using namespace attention_tc;
  using attention_wgmma::attention_forward_wgmma_kernel;
  Geometry g{};
  unsigned blocks = 0;
  if (!make_geometry(d, d.batch * d.n_heads, &g, &blocks)) return kTooLarge;
  const LaunchResult r = allow_shared_memory(attention_forward_wgmma_kernel, attention_wgmma::kForwardBytes,
                                             "cudaFuncSetAttribute (wgmma attention forward kernel)");
  if (!r.ok()) return r;
  attention_forward_wgmma_kernel<<<blocks, attention_wgmma::kThreads, attention_wgmma::kForwardBytes, stream>>>(
      g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
      static_cast<uint16_t*>(out), lse, row_amax);
  return after_launch("wgmma attention forward kernel");
}

}  // namespace fp8::cuda
