#include "cuda/gemm_cublaslt.h"

#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuda/cast_kernels.h"
#include "cuda/cublaslt_library.h"
#include "cuda/cuda_status.h"

namespace fp8::cuda {

namespace {
// cuBLASLt's functions, opened by CublasLtGemm::create() (cublaslt_library.h).
const cublaslt::Api& lt() { return cublaslt::api(); }
}  // namespace

// A cached cublasLtMatmul configuration. The pointer attributes (scales, bias) are set
// again before every call; everything else is fixed by the key.
struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) lt().cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) lt().cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) lt().cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) lt().cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
absl::Status cublas_status(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, ": ", lt().cublasLtGetStatusName(s), " (", lt().cublasLtGetStatusString(s), ")"));
}

template <typename T>
absl::Status set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
                      const char* what) {
  return cublas_status(lt().cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

template <typename T>
absl::Status set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value,
                      const char* what) {
  return cublas_status(lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)), what);
}

// Largest power of two (up to 256) dividing the address; a null pointer counts as 256.
uint16_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint16_t a = 256;
  while (a > 1 && address % a != 0) a = static_cast<uint16_t>(a / 2);
  return a;
}

cudaDataType_t fp8_type(Format f) { return f == Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
cudaDataType_t hp_type(DType t) { return t == DType::kFloat32 ? CUDA_R_32F : CUDA_R_16BF; }
HpType kernel_type(DType t) { return t == DType::kFloat32 ? HpType::kFloat32 : HpType::kBFloat16; }

// Sets the attributes that change from call to call: the device pointers.
absl::Status set_pointers(cublasLtMatmulDesc_t desc, const CublasLtGemm::PlanKey& key, const void* a_scale,
                          const void* b_scale, const void* bias) {
  if (key.scaled) {
    if (auto s = set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale,
                          "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
        !s.ok()) {
      return s;
    }
    if (auto s = set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale,
                          "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
        !s.ok()) {
      return s;
    }
  }
  if (key.bias_type >= 0) {
    return set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  return absl::OkStatus();
}

// Adds context (which GEMM, which shape and types) to a failure.
absl::Status with_context(const absl::Status& s, const std::string& what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

std::string describe(const ScaledGemmArgs& a) {
  return absl::StrCat("scaled_gemm m=", a.m, " n=", a.n, " k=", a.k, " A=", format_name(a.a.format), " ",
                      granularity_name(a.a.granularity), " B=", format_name(a.b.format), " ",
                      granularity_name(a.b.granularity), " out=", dtype_name(a.out_dtype),
                      a.bias != nullptr ? " +bias" : "", a.accumulate ? " +accumulate" : "",
                      a.addend != nullptr ? " +addend" : "", a.fast_accum ? " fast_accum" : "");
}

std::string describe(const GemmArgs& a) {
  return absl::StrCat("gemm m=", a.m, " n=", a.n, " k=", a.k, " in=", dtype_name(a.in_dtype),
                      a.trans_a ? " trans_a" : "", a.trans_b ? " trans_b" : "", " out=", dtype_name(a.out_dtype),
                      a.bias != nullptr ? " +bias" : "", a.addend != nullptr ? " +addend" : "");
}

// out = addend, where an addend distinct from out must be in out before a kernel that
// only adds onto out in place runs (the bias fill, an empty sum).
absl::Status copy_addend_to_out(const void* addend, void* out, int64_t m, int64_t n, DType t, cudaStream_t stream) {
  if (addend == nullptr || addend == out) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(m) * static_cast<size_t>(n) * dtype_size(t);
  return cuda_status(cudaMemcpyAsync(out, addend, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(addend)");
}

}  // namespace

size_t CublasLtGemm::PlanKeyHash::operator()(const PlanKey& k) const {
  // FNV-1a over the fields; the key is small and hashed once per call.
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (uint64_t v : {k.m, k.n, k.k}) mix(v);
  for (int32_t v : {k.a_type, k.b_type, k.d_type, k.bias_type, k.a_scale_mode, k.b_scale_mode}) {
    mix(static_cast<uint32_t>(v));
  }
  for (bool v : {k.trans_a, k.trans_b, k.scaled, k.outer_vec, k.fast_accum}) mix(v ? 1u : 0u);
  for (uint16_t v : {k.align_a, k.align_b, k.align_c, k.align_d, k.align_bias, k.align_a_scale, k.align_b_scale}) {
    mix(v);
  }
  return static_cast<size_t>(h);
}

CublasLtGemm::CublasLtGemm() = default;

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) lt().cublasLtDestroy(handle_);
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create(cudaStream_t stream, bool refuse_c) {
  if (auto s = cublaslt::load(); !s.ok()) return s;
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  g->refuse_c_ = refuse_c;
  if (auto s = cublas_status(lt().cublasLtCreate(&g->handle_), "cublasLtCreate"); !s.ok()) return s;
  if (auto s = cuda_status(cudaMalloc(&g->workspace_, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)"); !s.ok()) {
    return s;
  }
  // Scale vectors and bf16 biases fit the initial scratch: GEMMs then never allocate.
  if (auto s = g->scratch_.get(1, stream); !s.ok()) return s.status();
  return g;
}

absl::StatusOr<CublasLtGemm::Plan*> CublasLtGemm::plan_for(const Call& call) {
  const PlanKey& key = call.key;
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  if (auto s = cublas_status(lt().cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
      !s.ok()) {
    return s;
  }
  const int32_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a, "cublasLtMatmulDescSetAttribute(TRANSA)");
      !s.ok()) {
    return s;
  }
  if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b, "cublasLtMatmulDescSetAttribute(TRANSB)");
      !s.ok()) {
    return s;
  }
  if (key.scaled) {
    if (key.outer_vec) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode,
                            "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
          !s.ok()) {
        return s;
      }
      if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode,
                            "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
          !s.ok()) {
        return s;
      }
    } else if (key.a_scale_mode >= 0) {
      if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, key.a_scale_mode,
                            "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
          !s.ok()) {
        return s;
      }
      if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, key.b_scale_mode,
                            "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
          !s.ok()) {
        return s;
      }
    }
    const int8_t fast = key.fast_accum ? 1 : 0;
    if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast,
                          "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
        !s.ok()) {
      return s;
    }
  }
  if (key.bias_type >= 0) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue,
                          "cublasLtMatmulDescSetAttribute(EPILOGUE)");
        !s.ok()) {
      return s;
    }
    if (auto s = set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, key.bias_type,
                          "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
        !s.ok()) {
      return s;
    }
  }
  // The heuristic reads the pointer attributes' values to learn their alignment.
  if (auto s = set_pointers(plan->desc, key, call.a_scale, call.b_scale, call.bias); !s.ok()) return s;

  // Packed column-major layouts of the stored (pre-op) matrices.
  const auto a_type = static_cast<cudaDataType_t>(key.a_type);
  const auto b_type = static_cast<cudaDataType_t>(key.b_type);
  const auto d_type = static_cast<cudaDataType_t>(key.d_type);
  const uint64_t a_rows = key.trans_a ? key.k : key.m;
  const uint64_t a_cols = key.trans_a ? key.m : key.k;
  const uint64_t b_rows = key.trans_b ? key.n : key.k;
  const uint64_t b_cols = key.trans_b ? key.k : key.n;
  if (auto s = cublas_status(
          lt().cublasLtMatrixLayoutCreate(&plan->a, a_type, a_rows, a_cols, static_cast<int64_t>(a_rows)),
          "cublasLtMatrixLayoutCreate(A)");
      !s.ok()) {
    return s;
  }
  if (auto s = cublas_status(
          lt().cublasLtMatrixLayoutCreate(&plan->b, b_type, b_rows, b_cols, static_cast<int64_t>(b_rows)),
          "cublasLtMatrixLayoutCreate(B)");
      !s.ok()) {
    return s;
  }
  if (auto s = cublas_status(lt().cublasLtMatrixLayoutCreate(&plan->d, d_type, key.m, key.n, static_cast<int64_t>(key.m)),
                             "cublasLtMatrixLayoutCreate(D)");
      !s.ok()) {
    return s;
  }

  cublasLtMatmulPreference_t pref = nullptr;
  if (auto s = cublas_status(lt().cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"); !s.ok()) {
    return s;
  }
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { lt().cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t align_a = key.align_a, align_b = key.align_b, align_c = key.align_c, align_d = key.align_d;
  for (auto [attr, value, what] : {
           std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a, "MIN_ALIGNMENT_A_BYTES"},
           std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b, "MIN_ALIGNMENT_B_BYTES"},
           std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c, "MIN_ALIGNMENT_C_BYTES"},
           std::tuple{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d, "MIN_ALIGNMENT_D_BYTES"},
       }) {
    if (auto s = set_pref(pref, attr, value, "cublasLtMatmulPreferenceSetAttribute"); !s.ok()) {
      return with_context(s, what);
    }
  }
  if (auto s = set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace,
                        "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
      !s.ok()) {
    return s;
  }
  // Split-K partial sums meet in fp32 (in the workspace), never in D's type (cuBLASLt's
  // INPLACE and OUTPUT_TYPE schemes reduce in D's type, a bf16 rounding per part): the
  // output is rounded once, as the Backend contract says. Training steps measured no slower
  // with it (bench/RESULTS.md, bench_train before and after).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (auto s = set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction,
                        "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
      !s.ok()) {
    return s;
  }

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = lt().cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                                           pref, 1, &result, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt has no algorithm for this shape and these types on this GPU (",
                     lt().cublasLtGetStatusName(hs), " from cublasLtMatmulAlgoGetHeuristic)"));
  }
  if (auto s = cublas_status(hs, "cublasLtMatmulAlgoGetHeuristic"); !s.ok()) return s;
  plan->algo = result.algo;

  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

absl::Status CublasLtGemm::run(const Call& call, cudaStream_t stream) {
  auto plan = plan_for(call);
  if (!plan.ok()) return plan.status();
  Plan& p = **plan;
  if (auto s = set_pointers(p.desc, call.key, call.a_scale, call.b_scale, call.bias); !s.ok()) return s;
  // C has D's layout: the addend, or D itself (beta = 1 then accumulates into the output).
  const void* c = call.c != nullptr ? call.c : call.d;
  const bool refused = refuse_c_ && (c != call.d || call.beta != 0.0f);
  const cublasStatus_t st =
      refused ? CUBLAS_STATUS_NOT_SUPPORTED
              : lt().cublasLtMatmul(handle_, p.desc, &call.alpha, call.a, p.a, call.b, p.b, &call.beta, c, p.d, call.d,
                                    p.d, &p.algo, workspace_, kWorkspaceBytes, stream);
  // Should the kernel the heuristic chose refuse its C (cuBLASLt's C restrictions differ by
  // scale mode and GPU, and no GPU run has met one yet), the same sum takes another route.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED && c != call.d) return run_with_addend_in_d(call, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED && call.beta != 0.0f) return run_with_fp32_product(call, stream);
  return cublas_status(st, "cublasLtMatmul");
}

// A C apart from D refused: the addend goes into D first and the GEMM accumulates onto it in
// place: one copy more, the same result.
absl::Status CublasLtGemm::run_with_addend_in_d(const Call& call, cudaStream_t stream) {
  const size_t bytes = call.key.m * call.key.n * (call.key.d_type == CUDA_R_32F ? 4 : 2);
  if (auto s = cuda_status(cudaMemcpyAsync(call.d, call.c, bytes, cudaMemcpyDeviceToDevice, stream),
                           "cudaMemcpyAsync(addend into D)");
      !s.ok()) {
    return s;
  }
  Call in_place = call;
  in_place.c = nullptr;
  in_place.key.align_c = in_place.key.align_d;  // C is D now (another plan)
  return run(in_place, stream);
}

// D refused as C (accumulating in place): the GEMM writes its bare product to fp32 scratch
// (no C, no bias epilogue: the plainest kernel of its types), and one pass adds it and the
// bias onto D. All meet in fp32 and round once to D's type, as the accumulating GEMM's
// epilogue would; the price is the scratch and a pass over D.
absl::Status CublasLtGemm::run_with_fp32_product(const Call& call, cudaStream_t stream) {
  const int64_t count = static_cast<int64_t>(call.key.m * call.key.n);
  auto buffer = product_scratch_.get(static_cast<size_t>(count) * sizeof(float), stream);
  if (!buffer.ok()) return buffer.status();
  Call product = call;
  product.d = *buffer;
  product.c = nullptr;
  product.beta = 0.0f;
  product.bias = nullptr;
  product.key.bias_type = -1;
  product.key.align_bias = alignment(nullptr);
  product.key.d_type = CUDA_R_32F;
  product.key.align_c = product.key.align_d = alignment(product.d);
  if (auto s = run(product, stream); !s.ok()) return s;
  // D is column-major key.m x key.n: element i's bias entry is its row, i % key.m.
  const HpType d_type = call.key.d_type == CUDA_R_32F ? HpType::kFloat32 : HpType::kBFloat16;
  const HpType bias_type = call.key.bias_type == CUDA_R_16BF ? HpType::kBFloat16 : HpType::kFloat32;
  return cuda_status(launch_add_product(call.d, d_type, static_cast<const float*>(product.d), call.beta, count,
                                        call.key.bias_type >= 0 ? call.bias : nullptr, bias_type,
                                        static_cast<int64_t>(call.key.m), stream));
}

void CublasLtGemm::Call::align_key() {
  key.align_a = alignment(a);
  key.align_b = alignment(b);
  key.align_c = alignment(c != nullptr ? c : d);
  key.align_d = alignment(d);
  key.align_bias = alignment(bias);
  key.align_a_scale = alignment(a_scale);
  key.align_b_scale = alignment(b_scale);
}

CublasLtGemm::Call CublasLtGemm::swapped_fp8_call(const ScaledGemmArgs& a) {
  Call call;
  PlanKey& key = call.key;
  key.m = static_cast<uint64_t>(a.n);
  key.n = static_cast<uint64_t>(a.m);
  key.k = static_cast<uint64_t>(a.k);
  key.a_type = fp8_type(a.b.format);
  key.b_type = fp8_type(a.a.format);
  key.d_type = hp_type(a.out_dtype);
  key.trans_a = true;
  key.trans_b = false;
  key.scaled = true;
  call.a = a.b.data;
  call.b = a.a.data;
  call.d = a.out;
  return call;
}

absl::Status CublasLtGemm::scaled_gemm(const ScaledGemmArgs& a, cudaStream_t stream) {
  if (a.m == 0 || a.n == 0) return absl::OkStatus();
  const HpType out_type = kernel_type(a.out_dtype);
  const float beta = a.accumulate || a.addend != nullptr ? 1.0f : 0.0f;
  if (a.k == 0) {
    // An empty sum: out = bias (+ out or addend).
    if (auto s = copy_addend_to_out(a.addend, a.out, a.m, a.n, a.out_dtype, stream); !s.ok()) return s;
    return cuda_status(launch_bias_fill(a.out, out_type, a.m, a.n, a.bias, beta, stream));
  }
  if (is_block_granularity(a.a.granularity)) return scaled_gemm_blocks(a, stream);

  // Rowwise on either side puts both operands in OUTER_VEC mode (cuBLASLt has no mixed
  // scalar/vector mode); a tensorwise factor is then broadcast into a vector.
  const bool rowwise = a.a.granularity == Granularity::kRowwise || a.b.granularity == Granularity::kRowwise;
  const bool broadcast_a = rowwise && a.a.granularity == Granularity::kTensorwise;
  const bool broadcast_b = rowwise && a.b.granularity == Granularity::kTensorwise;
  // cuBLASLt's fp8 bias must be bf16 (or fp16) whatever D's type. For bf16 output that
  // rounding is below the output's own; for fp32 output the bias is instead added exactly
  // by writing it into `out` first and accumulating onto it (beta = 1).
  const bool bias_epilogue = a.bias != nullptr && a.out_dtype == DType::kBFloat16;
  const bool bias_prefill = a.bias != nullptr && a.out_dtype == DType::kFloat32;

  ScratchLayout layout;
  const size_t a_vec_at = broadcast_a ? layout.add(static_cast<size_t>(a.m) * sizeof(float)) : 0;
  const size_t b_vec_at = broadcast_b ? layout.add(static_cast<size_t>(a.n) * sizeof(float)) : 0;
  const size_t bias_at = bias_epilogue ? layout.add(static_cast<size_t>(a.n) * sizeof(uint16_t)) : 0;
  char* scratch = nullptr;
  if (layout.total() > 0) {
    auto got = scratch_.get(layout.total(), stream);
    if (!got.ok()) return got.status();
    scratch = static_cast<char*>(*got);
  }

  const float* a_factors = a.a.inv_scale;
  const float* b_factors = a.b.inv_scale;
  if (broadcast_a) {
    auto* v = reinterpret_cast<float*>(scratch + a_vec_at);
    if (auto s = cuda_status(launch_broadcast(a.a.inv_scale, v, a.m, stream)); !s.ok()) return s;
    a_factors = v;
  }
  if (broadcast_b) {
    auto* v = reinterpret_cast<float*>(scratch + b_vec_at);
    if (auto s = cuda_status(launch_broadcast(a.b.inv_scale, v, a.n, stream)); !s.ok()) return s;
    b_factors = v;
  }
  const void* bias = nullptr;
  if (bias_epilogue) {
    void* converted = scratch + bias_at;
    if (auto s = cuda_status(launch_convert(a.bias, HpType::kFloat32, converted, HpType::kBFloat16, a.n, stream));
        !s.ok()) {
      return s;
    }
    bias = converted;
  }
  Call call = swapped_fp8_call(a);
  call.beta = beta;
  call.c = a.addend;
  if (bias_prefill) {
    if (auto s = copy_addend_to_out(a.addend, a.out, a.m, a.n, a.out_dtype, stream); !s.ok()) return s;
    if (auto s = cuda_status(launch_bias_fill(a.out, HpType::kFloat32, a.m, a.n, a.bias, beta, stream)); !s.ok()) {
      return s;
    }
    call.beta = 1.0f;
    call.c = nullptr;  // the addend is in out now
  }

  // cuBLAS A's scale covers its m = our n, i.e. our B's factors; cuBLAS B's covers our A's.
  PlanKey& key = call.key;
  key.outer_vec = rowwise;
  key.fast_accum = a.fast_accum;
  key.bias_type = bias_epilogue ? CUDA_R_16BF : -1;
  call.a_scale = b_factors;
  call.b_scale = a_factors;
  call.bias = bias;
  call.align_key();
  if (auto s = run(call, stream); !s.ok()) return with_context(s, describe(a));
  return absl::OkStatus();
}

// Block-scaled operands (validated: both block-scaled, not both 128x128, k a multiple of
// 128): cuBLASLt's VEC128_32F (1x128) and BLK128x128_32F (128x128) scale modes on Hopper,
// which take the scale vectors in fp8.h's layout as they are. Operands swap as in
// scaled_gemm: cuBLAS A is our B, cuBLAS B our A, and so do their scales and modes.
//  * No FAST_ACCUM: block scaling means promoted accumulation (each 128-wide K block's sum
//    scaled and added in fp32), which the block modes do themselves; PyTorch refuses fast
//    accumulation with them as well. ScaledGemmArgs::fast_accum is therefore not read here.
//  * No bias epilogue: its vector would be bf16 (a rounding the host backends do not make),
//    and cuBLASLt documents its block modes with the default epilogue only for some GEMMs
//    (grouped ones on Hopper), so the plain product is the safer request. An fp32 output
//    takes the bias exactly through a prefill (as in scaled_gemm); a bf16 one through the
//    fp32 product and one pass adding the bias and the output's previous value, rounded
//    once.
absl::Status CublasLtGemm::scaled_gemm_blocks(const ScaledGemmArgs& a, cudaStream_t stream) {
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
  const auto mode_of = [](Granularity g) -> int32_t {
    return g == Granularity::kBlock128x128 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                           : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  };
  Call call = swapped_fp8_call(a);
  call.beta = a.accumulate || a.addend != nullptr ? 1.0f : 0.0f;
  call.c = a.addend;
  PlanKey& key = call.key;
  key.a_scale_mode = mode_of(a.b.granularity);
  key.b_scale_mode = mode_of(a.a.granularity);
  key.fast_accum = false;
  call.a_scale = a.b.inv_scale;
  call.b_scale = a.a.inv_scale;
  const bool bias_after = a.bias != nullptr && a.out_dtype == DType::kBFloat16;
  if (a.bias != nullptr) {
    // The addend goes into out first either way: C is then out itself.
    if (auto s = copy_addend_to_out(a.addend, a.out, a.m, a.n, a.out_dtype, stream); !s.ok()) {
      return with_context(s, describe(a));
    }
    call.c = nullptr;
    if (!bias_after) {
      if (auto s = cuda_status(launch_bias_fill(a.out, HpType::kFloat32, a.m, a.n, a.bias, call.beta, stream));
          !s.ok()) {
        return with_context(s, describe(a));
      }
      call.beta = 1.0f;
    } else {
      // run_with_fp32_product adds the bias in fp32 (bias_type names its vector's type).
      call.bias = a.bias;
      key.bias_type = CUDA_R_32F;
    }
  }
  call.align_key();
  const absl::Status s = bias_after ? run_with_fp32_product(call, stream) : run(call, stream);
  if (!s.ok()) return with_context(s, describe(a));
  return absl::OkStatus();
#else
  (void)stream;
  return absl::UnimplementedError(absl::StrCat(describe(a), ": this build's cuBLASLt headers predate the block ",
                                               "scale modes (VEC128_32F, BLK128x128_32F: cuBLAS 12.9 and later)"));
#endif
}

absl::Status CublasLtGemm::gemm(const GemmArgs& a, cudaStream_t stream) {
  if (a.m == 0 || a.n == 0) return absl::OkStatus();
  const HpType out_type = kernel_type(a.out_dtype);
  if (a.k == 0) {
    // alpha · (empty sum) = 0: out = beta · C + bias.
    if (a.beta != 0.0f) {
      if (auto s = copy_addend_to_out(a.addend, a.out, a.m, a.n, a.out_dtype, stream); !s.ok()) return s;
    }
    return cuda_status(launch_bias_fill(a.out, out_type, a.m, a.n, a.bias, a.beta, stream));
  }

  // cuBLASLt's fp32 x fp32 GEMM (CUBLAS_COMPUTE_32F, no TF32) writes fp32 only, so a bf16
  // output from fp32 inputs goes through an fp32 temporary: one rounding, as on the CPU.
  const bool via_fp32 = a.in_dtype == DType::kFloat32 && a.out_dtype == DType::kBFloat16;
  const DType d_dtype = via_fp32 ? DType::kFloat32 : a.out_dtype;
  // The bias epilogue's vector has D's type: fp32 is exact; a bf16 D takes a bf16 copy.
  const bool bias_bf16 = a.bias != nullptr && d_dtype == DType::kBFloat16;
  const size_t count = static_cast<size_t>(a.m) * static_cast<size_t>(a.n);

  ScratchLayout layout;
  const size_t tmp_at = via_fp32 ? layout.add(count * sizeof(float)) : 0;
  const size_t bias_at = bias_bf16 ? layout.add(static_cast<size_t>(a.n) * sizeof(uint16_t)) : 0;
  char* scratch = nullptr;
  if (layout.total() > 0) {
    auto got = scratch_.get(layout.total(), stream);
    if (!got.ok()) return got.status();
    scratch = static_cast<char*>(*got);
  }

  void* d = a.out;
  const void* c = a.addend;  // null: C is D
  if (via_fp32) {
    d = scratch + tmp_at;
    c = nullptr;  // beta's operand is widened into the fp32 temporary D
    if (a.beta != 0.0f) {
      const void* addend = a.addend != nullptr ? a.addend : a.out;
      if (auto s = cuda_status(launch_convert(addend, HpType::kBFloat16, d, HpType::kFloat32,
                                              static_cast<int64_t>(count), stream));
          !s.ok()) {
        return s;
      }
    }
  }
  const void* bias = a.bias;
  if (bias_bf16) {
    void* converted = scratch + bias_at;
    if (auto s = cuda_status(launch_convert(a.bias, HpType::kFloat32, converted, HpType::kBFloat16, a.n, stream));
        !s.ok()) {
      return s;
    }
    bias = converted;
  }

  // outᵀ (n x m) = op(B)ᵀ · op(A)ᵀ. Row-major B [k, n] is column-major n x k: op N; with
  // trans_b it is stored [n, k] = column-major k x n: op T. Likewise for A.
  Call call;
  PlanKey& key = call.key;
  key.m = static_cast<uint64_t>(a.n);
  key.n = static_cast<uint64_t>(a.m);
  key.k = static_cast<uint64_t>(a.k);
  key.a_type = hp_type(a.in_dtype);
  key.b_type = hp_type(a.in_dtype);
  key.d_type = hp_type(d_dtype);
  key.trans_a = a.trans_b;
  key.trans_b = a.trans_a;
  key.bias_type = a.bias != nullptr ? hp_type(d_dtype) : -1;
  call.a = a.b;
  call.b = a.a;
  call.d = d;
  call.c = c;
  call.bias = bias;
  call.alpha = a.alpha;
  call.beta = a.beta;
  call.align_key();
  if (auto s = run(call, stream); !s.ok()) return with_context(s, describe(a));

  if (via_fp32) {
    return cuda_status(
        launch_convert(d, HpType::kFloat32, a.out, HpType::kBFloat16, static_cast<int64_t>(count), stream));
  }
  return absl::OkStatus();
}

}  // namespace fp8::cuda
