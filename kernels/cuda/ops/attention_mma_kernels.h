// Causal grouped-query attention on the tensor cores with every tile in registers
// (mma.sync m16n8k16, ldmatrix, cp.async double buffering): FlashAttention-2's layout, for
// bf16 activations and head_dim 64 or 128. Same contract and numerics as the WMMA kernels
// of attention_tc_kernels.h (bf16 P and dS as product operands, fp32 softmax and
// accumulation, deterministic), which they are meant to replace once measured faster;
// until then they run only with FP8_CUDA_ATTENTION=mma. Internal to kernels/cuda/ops.
//
// NOT YET RUN ON A GPU: checked only in a CPU emulation of the instructions
// (tests/ops/attention_mma_emulation_test.cc) against an fp64 reference.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/cast_kernels.h"           // LaunchResult
#include "cuda/ops/attention_kernels.h"  // AttentionDims

namespace fp8::cuda {

LaunchResult launch_attention_forward_mma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                          void* out, float* lse, cudaStream_t stream);
LaunchResult launch_attention_backward_mma(const AttentionDims& d, const void* q, const void* k, const void* v,
                                           const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                           void* grad_k, void* grad_v, cudaStream_t stream);

}  // namespace fp8::cuda
