// The few GPU pieces the benchmarks need that no fp8 interface offers: the sigmoid of
// torchao's ln -> linear -> sigmoid step (ModelOps has no sigmoid; the model never needs
// one), handing cached device memory back between benchmark contenders, and timing marks
// in a stream (bench_train --breakdown).
//
// bench_cuda.cc (with its kernels in bench_cuda_kernels.cu) implements these where the
// build has CUDA (FP8_HAVE_CUDA); bench_cuda_stub.cc otherwise, returning Unimplemented,
// so that every caller compiles in both builds and the GPU branches are type-checked on
// machines without nvcc.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/op_timer.h"

namespace fp8::bench {

// s = sigmoid(y) elementwise over n values, queued on `stream` (a cudaStream_t): fp32, or
// bf16 carried as its raw 16 bits (as fp8/arith.h does), computed in fp32 and rounded once
// to nearest even.
absl::Status cuda_sigmoid_forward(const float* y, int64_t n, float* s, void* stream);
absl::Status cuda_sigmoid_forward(const uint16_t* y, int64_t n, uint16_t* s, void* stream);

// The backward of sum(sigmoid(y)): ∂/∂y = s · (1 - s), read from the saved output s
// (as torch's sigmoid_backward does), written to grad_y; queued on `stream`. fp32 or bf16
// as above.
absl::Status cuda_sigmoid_backward_of_sum(const float* s, int64_t n, float* grad_y, void* stream);
absl::Status cuda_sigmoid_backward_of_sum(const uint16_t* s, int64_t n, uint16_t* grad_y, void* stream);

// Waits for the device, then gives the memory the default pool of `device` caches back to
// the driver (cudaMemPoolTrimTo 0). The CUDA backend's allocator keeps every freed block
// for reuse within a run; a benchmark that builds and destroys one large trainer after
// another calls this in between so that the next one starts from an empty pool and its
// peak "reserved" figure is its own.
absl::Status cuda_release_cached_memory(int device);

// Total and free device memory, in bytes (cudaMemGetInfo on `device`).
absl::Status cuda_memory_info(int device, int64_t* free_bytes, int64_t* total_bytes);

// Marks as CUDA events recorded on `stream` (a cudaStream_t of `device`), timed by the GPU:
// for bench/op_breakdown.h. Events are made as marks need them and kept for reuse.
absl::StatusOr<std::unique_ptr<OpTimer>> cuda_op_timer(int device, void* stream);

}  // namespace fp8::bench
