// The attention on Hopper's warpgroup MMA (attention_wgmma_device.cuh): its
// launchers, in a library of its own built for sm_90a (wgmma exists only there; the rest of
// the kernels stay sm_90 with PTX for newer GPUs). Internal to kernels/cuda/ops.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/cast_kernels.h"           // LaunchResult
#include "cuda/ops/attention_kernels.h"  // AttentionDims

namespace fp8::cuda {

// The tensor-core attention's kernels on an sm_90 (Hopper) device for bf16 head_dim 64
// or 128, unless FP8_CUDA_ATTENTION=mma asks for the mma.sync kernels
// (attention_tc_kernels.cu checks the rest of tensor_core_attention_applies first).
// FP8_WGMMA_MN_MAJOR=exchanged makes the launchers read transposed tiles with the MN-major
// descriptors' LBO and SBO exchanged, for a GPU whose fp8_wgmma_probe_test finds that
// reading the hardware's (any value but unset, 'default' or 'exchanged' fails the launch).
bool wgmma_attention_applies(const AttentionDims& d);

// As launch_attention_forward_tc, with row_amax (when given) already zeroed.
LaunchResult launch_attention_forward_wgmma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                            void* out, float* lse, float* row_amax, cudaStream_t stream);
// The two kernels of launch_attention_backward_tc, each on the stream given (the caller
// runs them side by side).
LaunchResult launch_attention_grad_kv_wgmma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                            const float* lse, const float* delta, const void* grad_out,
                                            void* grad_k, void* grad_v, cudaStream_t stream);
LaunchResult launch_attention_grad_q_wgmma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                           const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                           cudaStream_t stream);

}  // namespace fp8::cuda
