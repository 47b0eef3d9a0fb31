// The attention on Hopper's warpgroup MMA (attention_wgmma_device.cuh): its
// launchers, in a library of its own built for sm_90a (wgmma exists only there; the rest of
// the kernels stay sm_90 with PTX for newer GPUs). Internal to kernels/cuda/ops.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/cast_kernels.h"           // LaunchResult
#include "cuda/ops/attention_kernels.h"  // AttentionLaunch

namespace fp8::cuda {

// The tensor-core attention's kernels on an sm_90 (Hopper) device for bf16 head_dim 64
// or 128, unless d.kernels asks for the mma.sync ones (attention_tc_kernels.cu checks the
// rest of tensor_core_attention_applies first).
bool wgmma_attention_applies(const AttentionLaunch& d);

// As launch_attention_forward_tc, with row_amax (when given) already zeroed.
LaunchResult launch_attention_forward_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                            void* out, float* lse, float* row_amax, cudaStream_t stream);
// The two kernels of launch_attention_backward_tc, each on the stream given (the caller
// runs them side by side).
LaunchResult launch_attention_grad_kv_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                            const float* lse, const float* delta, const void* grad_out,
                                            void* grad_k, void* grad_v, cudaStream_t stream);
LaunchResult launch_attention_grad_q_wgmma(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                           const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                           cudaStream_t stream);

}  // namespace fp8::cuda
