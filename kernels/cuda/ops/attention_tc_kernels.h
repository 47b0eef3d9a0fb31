// Causal grouped-query attention on the tensor cores, for bf16 activations: the path
// attention_kernels.h's launchers take when tensor_core_attention_applies(). Internal to
// kernels/cuda/ops (plain C++ for the host side, like attention_kernels.h).
//
// FlashAttention-2 on mma.sync with every tile in registers (attention_mma_device.cuh).
// Same contract as the SIMT kernels (layouts, lse, delta, grad_q / grad_k / grad_v written,
// deterministic: no floating-point atomics, grad_k / grad_v owned by their key tile's
// block, grad_q by its query tile's), with FlashAttention-2's precision on the tensor
// cores: the products Q·Kᵀ, P·V, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q and dS·K take bf16 operands and
// accumulate in fp32; the softmax, its running max and sum, and dS are fp32 and rounded to
// bf16 (nearest even) only as GEMM operands. So the results agree with the CPU's fp32
// attention to bf16 rounding of P and dS, not to the bit as the SIMT kernels' do.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "cuda/cast_kernels.h"               // LaunchResult, HpType
#include "cuda/ops/attention_kernels.h"      // AttentionLaunch

namespace fp8::cuda {

// bf16 activations, head_dim 64 or 128, every activation pointer 16-byte aligned, a device
// of compute capability 8.0 or newer (bf16 tensor cores), and d.kernels not kSimt (the SIMT
// kernels then run, for comparison).
bool tensor_core_attention_applies(const AttentionLaunch& d, HpType act, std::initializer_list<const void*> pointers);

// Activations are bf16 bits (uint16_t); lse and delta fp32, [batch, n_heads, seq].
// row_amax (may be null): [batch · seq], zeroed here, then each row's amax of out.
LaunchResult launch_attention_forward_tc(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                         void* out, float* lse, float* row_amax, cudaStream_t stream);
// `delta` = grad_out · out per row, already computed (attention_kernels.cu's delta pass).
LaunchResult launch_attention_backward_tc(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                          const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                          void* grad_k, void* grad_v, cudaStream_t stream);

}  // namespace fp8::cuda
