// The CUDA backend's GEMMs through cuBLASLt: the fp8 scaled GEMM and the high-precision
// baseline. Owns the cuBLASLt handle, the 32 MiB workspace, a small device scratch and a
// cache of matmul plans (descriptor, layouts and the heuristic's algorithm) keyed by
// everything the heuristic depends on, so a repeated shape costs no heuristic query.
//
// Row-major to column-major: cuBLAS sees a row-major [r, c] matrix as its transpose, so a
// row-major out[m, n] = X · Y is computed as the column-major outᵀ = Yᵀ · Xᵀ: operands
// swapped, cuBLAS m = our n and cuBLAS n = our m.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda/device_buffer.h"
#include "fp8/fp8.h"

namespace fp8::cuda {

class CublasLtGemm {
 public:
  // cuBLASLt's recommended workspace on Hopper.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // Creates the handle, the workspace and the scratch on the current device, for work
  // queued on `stream`.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> create(cudaStream_t stream, bool refuse_c);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Arguments are validated by the caller (check_scaled_gemm / check_gemm). Work is queued
  // on `stream`; not thread-safe (the backend serialises calls).
  absl::Status scaled_gemm(const ScaledGemmArgs& a, cudaStream_t stream);
  absl::Status gemm(const GemmArgs& a, cudaStream_t stream);

  // Everything a cached plan depends on, in cuBLAS (column-major) terms.
  struct PlanKey {
    uint64_t m = 0, n = 0, k = 0;
    int32_t a_type = 0, b_type = 0, d_type = 0;  // cudaDataType; C has D's type and layout
    bool trans_a = false, trans_b = false;
    bool scaled = false;      // fp8: A/B scale pointers
    bool outer_vec = false;   // fp8 rowwise: OUTER_VEC_32F scale vectors
    // fp8 block scaling: cuBLASLt's scale modes of A and B (VEC128_32F, BLK128x128_32F);
    // -1 for the other granularities.
    int32_t a_scale_mode = -1, b_scale_mode = -1;
    bool fast_accum = false;  // fp8 only
    int32_t bias_type = -1;   // cudaDataType of the bias epilogue's vector, -1 without bias
    // Pointer alignments (bytes, up to 256): the heuristic picks kernels for them.
    uint16_t align_a = 0, align_b = 0, align_c = 0, align_d = 0, align_bias = 0, align_a_scale = 0, align_b_scale = 0;
    bool operator==(const PlanKey&) const = default;
  };

 private:
  struct Plan;
  struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const;
  };
  // One cublasLtMatmul: D = alpha · op(A) · op(B) [· scales] + beta · C (+ bias), where C
  // is `c` (an addend, D's type and layout) or, when null, D itself.
  struct Call {
    PlanKey key;
    const void* a = nullptr;
    const void* b = nullptr;
    void* d = nullptr;
    const void* c = nullptr;
    const void* a_scale = nullptr;
    const void* b_scale = nullptr;
    const void* bias = nullptr;
    float alpha = 1.0f;
    float beta = 0.0f;
    // The key's alignments, from the pointers as they are now (a plan is per alignment).
    void align_key();
  };
  // An fp8 GEMM's call with the operands swapped for cuBLASLt's column-major view: cuBLAS
  // A = our B ([n, k] row-major = k x n column-major, op T), cuBLAS B = our A ([m, k]
  // row-major = k x m column-major, op N), D = out (n x m column-major). Scales, modes,
  // bias and beta are the caller's.
  static Call swapped_fp8_call(const ScaledGemmArgs& a);

  CublasLtGemm();
  // The cached plan for call.key, created (with one heuristic query) on first use.
  absl::StatusOr<Plan*> plan_for(const Call& call);
  absl::Status run(const Call& call, cudaStream_t stream);
  absl::Status run_with_addend_in_d(const Call& call, cudaStream_t stream);
  absl::Status run_with_fp32_product(const Call& call, cudaStream_t stream);
  // scaled_gemm with block-scaled operands (k > 0, m, n > 0).
  absl::Status scaled_gemm_blocks(const ScaledGemmArgs& a, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  DeviceBuffer scratch_;
  DeviceBuffer product_scratch_;  // run_with_fp32_product's; allocated only if that route is taken
  // Every C treated as refused (as cublasLtMatmul's NOT_SUPPORTED), so that a GPU whose
  // kernels accept them still runs the fallback routes (CudaBackendOptions::refuse_gemm_c).
  bool refuse_c_ = false;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
};

}  // namespace fp8::cuda
