// Launches the kernel of ModelOps::kv_cache_attention_forward (kv_cache_attention_device.cuh).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/ops/attention_kernels.h"
#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/kv_cache_attention_device.cuh"

namespace fp8::cuda {

LaunchResult launch_kv_cache_attention_forward(const KvCacheAttentionLaunch& d, const void* q, const void* k_cache,
                                               const void* v_cache, void* out, HpType act, cudaStream_t stream) {
  const int64_t units = d.batch * d.seq * d.n_heads;
  if (units > INT_MAX) return model::kTooLarge;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  return model::with_act(act, [&](auto tag) -> LaunchResult {
    using T = decltype(tag);
    kv_cache::kv_cache_attention_kernel<T><<<static_cast<unsigned>(units), kv_cache::kCacheThreads, 0, stream>>>(
        d, scale, static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
        static_cast<T*>(out));
    return model::after_launch("kv cache attention kernel");
  });
}

}  // namespace fp8::cuda
