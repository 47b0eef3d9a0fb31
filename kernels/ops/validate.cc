#include "ops/validate.h"

#include <climits>
#include <cmath>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "ops/rope_table.h"

namespace fp8::ops {
namespace {

struct NamedPointer {
  const char* name;
  const void* ptr;
};

struct NamedDim {
  const char* name;
  int64_t value;
};

template <typename... Parts>
absl::Status invalid(const char* op, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", parts...));
}

absl::Status check_not_null(const char* op, std::initializer_list<NamedPointer> pointers) {
  for (const auto& p : pointers) {
    if (p.ptr == nullptr) return invalid(op, p.name, " is null");
  }
  return absl::OkStatus();
}

// The dims of one tensor: each must be positive, and the tensor's size in bytes must fit
// in int64 so that no index computation downstream can overflow. Counted as fp32 bytes
// whatever the activations' type: the CPU stages bf16 activations through fp32 copies.
absl::Status check_tensor_dims(const char* op, std::initializer_list<NamedDim> dims) {
  int64_t bytes = static_cast<int64_t>(sizeof(float));
  for (const auto& d : dims) {
    if (d.value <= 0) return invalid(op, d.name, " must be positive, got ", d.value);
    if (__builtin_mul_overflow(bytes, d.value, &bytes)) {
      std::string shape;
      for (const auto& e : dims) absl::StrAppend(&shape, shape.empty() ? "" : ", ", e.name, "=", e.value);
      return invalid(op, "shape [", shape, "] is too large");
    }
  }
  return absl::OkStatus();
}

// Activations are fp32 or bf16 (model_ops.h); anything else is rejected before any other
// check, since every other check reads the call as one of those two.
absl::Status check_activation_type(const char* op, DType act) {
  if (act == DType::kFloat32 || act == DType::kBFloat16) return absl::OkStatus();
  return invalid(op, "activations must be float32 or bfloat16, got ", dtype_name(act));
}

absl::Status check_elementwise(const char* op, int64_t n, std::initializer_list<NamedPointer> pointers) {
  if (auto s = check_tensor_dims(op, {{"n", n}}); !s.ok()) return s;
  return check_not_null(op, pointers);
}

absl::Status check_activation_elementwise(const char* op, DType act, int64_t n,
                                          std::initializer_list<NamedPointer> pointers) {
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  return check_elementwise(op, n, pointers);
}

absl::Status check_attention_shape(const char* op, const AttentionShape& s) {
  if (auto st =
          check_tensor_dims(op, {{"batch", s.batch}, {"seq", s.seq}, {"n_heads", s.n_heads}, {"head_dim", s.head_dim}});
      !st.ok()) {
    return st;
  }
  if (s.n_kv_heads <= 0) return invalid(op, "n_kv_heads must be positive, got ", s.n_kv_heads);
  if (s.n_heads % s.n_kv_heads != 0) {
    return invalid(op, "n_heads (", s.n_heads, ") is not a multiple of n_kv_heads (", s.n_kv_heads, ")");
  }
  // GEMM libraries (OpenBLAS, cuBLAS) take int sizes and leading dimensions.
  if (s.seq > INT_MAX || s.n_heads * s.head_dim > INT_MAX) {
    return invalid(op, "seq (", s.seq, ") or n_heads * head_dim (", s.n_heads * s.head_dim, ") exceeds ", INT_MAX);
  }
  return absl::OkStatus();
}

absl::Status check_rope_shape(const char* op, const RopeShape& s, double theta) {
  if (auto st =
          check_tensor_dims(op, {{"batch", s.batch}, {"seq", s.seq}, {"heads", s.heads}, {"head_dim", s.head_dim}});
      !st.ok()) {
    return st;
  }
  if (s.head_dim % 2 != 0) return invalid(op, "head_dim must be even to rotate pairs, got ", s.head_dim);
  if (!(theta > 0.0) || !std::isfinite(theta)) return invalid(op, "theta must be positive and finite, got ", theta);
  if (s.start < 0) return invalid(op, "start must be zero or positive, got ", s.start);
  if (s.start > kMaxRopePositions || s.seq > kMaxRopePositions - s.start) {
    return invalid(op, "positions up to start + seq = ", s.start, " + ", s.seq, " exceed the limit of ",
                   kMaxRopePositions);
  }
  return absl::OkStatus();
}

absl::Status check_row_amaxes(const char* op, const char* name, int64_t n, const RowAmaxes& row_amax) {
  if (row_amax.out == nullptr) return absl::OkStatus();
  if (row_amax.row_length <= 0 || n % row_amax.row_length != 0) {
    return invalid(op, name, " needs a row_length that divides n=", n, ", got ", row_amax.row_length);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                        int64_t dim, const void* out, DType act) {
  constexpr const char* op = "embedding_forward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"n", n}, {"dim", dim}}); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"vocab", vocab}, {"dim", dim}}); !s.ok()) return s;
  return check_not_null(op, {{"tokens", tokens}, {"table", table}, {"out", out}});
}

absl::Status validate_embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab,
                                         int64_t dim, const float* grad_table, DType act) {
  constexpr const char* op = "embedding_backward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"n", n}, {"dim", dim}}); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"vocab", vocab}, {"dim", dim}}); !s.ok()) return s;
  return check_not_null(op, {{"tokens", tokens}, {"grad_out", grad_out}, {"grad_table", grad_table}});
}

absl::Status validate_rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                      const void* out, const float* inv_rms, DType act) {
  constexpr const char* op = "rmsnorm_forward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"rows", rows}, {"dim", dim}}); !s.ok()) return s;
  if (!(eps > 0.0f) || !std::isfinite(eps)) return invalid(op, "eps must be positive and finite, got ", eps);
  return check_not_null(op, {{"x", x}, {"weight", weight}, {"out", out}, {"inv_rms", inv_rms}});
}

absl::Status validate_rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                       int64_t rows, int64_t dim, const void* grad_x, const float* grad_weight,
                                       DType act) {
  constexpr const char* op = "rmsnorm_backward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"rows", rows}, {"dim", dim}}); !s.ok()) return s;
  return check_not_null(op, {{"x", x},
                             {"weight", weight},
                             {"inv_rms", inv_rms},
                             {"grad_out", grad_out},
                             {"grad_x", grad_x},
                             {"grad_weight", grad_weight}});
}

absl::Status validate_rope_forward(const RopeShape& shape, double theta, const void* x, const void* out, DType act) {
  constexpr const char* op = "rope_forward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_rope_shape(op, shape, theta); !s.ok()) return s;
  return check_not_null(op, {{"x", x}, {"out", out}});
}

absl::Status validate_rope_backward(const RopeShape& shape, double theta, const void* grad_out, const void* grad_x,
                                    DType act) {
  constexpr const char* op = "rope_backward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_rope_shape(op, shape, theta); !s.ok()) return s;
  return check_not_null(op, {{"grad_out", grad_out}, {"grad_x", grad_x}});
}

absl::Status validate_attention_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                        const void* out, const float* lse, DType act) {
  constexpr const char* op = "attention_forward";
  if (auto st = check_activation_type(op, act); !st.ok()) return st;
  if (auto st = check_attention_shape(op, s); !st.ok()) return st;
  return check_not_null(op, {{"q", q}, {"k", k}, {"v", v}, {"out", out}, {"lse", lse}});
}

absl::Status validate_attention_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                         const void* out, const float* lse, const void* grad_out, const void* grad_q,
                                         const void* grad_k, const void* grad_v, DType act) {
  constexpr const char* op = "attention_backward";
  if (auto st = check_activation_type(op, act); !st.ok()) return st;
  if (auto st = check_attention_shape(op, s); !st.ok()) return st;
  return check_not_null(op, {{"q", q},
                             {"k", k},
                             {"v", v},
                             {"out", out},
                             {"lse", lse},
                             {"grad_out", grad_out},
                             {"grad_q", grad_q},
                             {"grad_k", grad_k},
                             {"grad_v", grad_v}});
}

absl::Status validate_kv_cache_attention_forward(const KvCacheAttentionShape& s, const void* q, const void* k_cache,
                                                 const void* v_cache, const void* out, DType act) {
  constexpr const char* op = "kv_cache_attention_forward";
  if (auto st = check_activation_type(op, act); !st.ok()) return st;
  if (auto st = check_attention_shape(op, {s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim}); !st.ok()) return st;
  if (s.past < 0) return invalid(op, "past must be zero or positive, got ", s.past);
  if (s.past > INT_MAX - s.seq) return invalid(op, "past + seq = ", s.past, " + ", s.seq, " exceeds ", INT_MAX);
  if (s.cache_len < s.past + s.seq) {
    return invalid(op, "the cache's ", s.cache_len, " rows do not hold past + seq = ", s.past, " + ", s.seq,
                   " positions");
  }
  if (auto st = check_tensor_dims(
          op, {{"batch", s.batch}, {"cache_len", s.cache_len}, {"n_kv_heads", s.n_kv_heads}, {"head_dim", s.head_dim}});
      !st.ok()) {
    return st;
  }
  return check_not_null(op, {{"q", q}, {"k_cache", k_cache}, {"v_cache", v_cache}, {"out", out}});
}

absl::Status validate_swiglu_forward(const void* gate, const void* up, int64_t n, const void* out, DType act,
                                     const RowAmaxes& row_amax) {
  constexpr const char* op = "swiglu_forward";
  if (auto s = check_activation_elementwise(op, act, n, {{"gate", gate}, {"up", up}, {"out", out}}); !s.ok()) return s;
  return check_row_amaxes(op, "row_amax", n, row_amax);
}

absl::Status validate_swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n,
                                      const void* grad_gate, const void* grad_up, DType act,
                                      const RowAmaxes& grad_gate_row_amax, const RowAmaxes& grad_up_row_amax) {
  constexpr const char* op = "swiglu_backward";
  if (auto s = check_activation_elementwise(
          op, act, n,
          {{"gate", gate}, {"up", up}, {"grad_out", grad_out}, {"grad_gate", grad_gate}, {"grad_up", grad_up}});
      !s.ok()) {
    return s;
  }
  if (auto s = check_row_amaxes(op, "grad_gate_row_amax", n, grad_gate_row_amax); !s.ok()) return s;
  if (auto s = check_row_amaxes(op, "grad_up_row_amax", n, grad_up_row_amax); !s.ok()) return s;
  if (grad_gate_row_amax.out != nullptr && grad_up_row_amax.out != nullptr &&
      grad_gate_row_amax.row_length != grad_up_row_amax.row_length) {
    return invalid(op, "grad_gate_row_amax and grad_up_row_amax need the same row_length, got ",
                   grad_gate_row_amax.row_length, " and ", grad_up_row_amax.row_length);
  }
  return absl::OkStatus();
}

absl::Status validate_add(const void* a, const void* b, int64_t n, const void* out, DType act) {
  return check_activation_elementwise("add", act, n, {{"a", a}, {"b", b}, {"out", out}});
}

absl::Status validate_accumulate(const void* x, int64_t n, const void* y, DType act) {
  return check_activation_elementwise("accumulate", act, n, {{"x", x}, {"y", y}});
}

namespace {

absl::Status check_padded_vocab(const char* op, int64_t vocab, int64_t padded_vocab) {
  if (padded_vocab == 0 || padded_vocab >= vocab) return absl::OkStatus();
  return invalid(op, "padded_vocab ", padded_vocab, " is smaller than vocab ", vocab, " (0 for no padding)");
}

}  // namespace

absl::Status validate_cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                            int64_t padded_vocab, const float* loss, const float* lse, DType act) {
  constexpr const char* op = "cross_entropy_forward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"rows", rows}, {"vocab", vocab}}); !s.ok()) return s;
  if (auto s = check_padded_vocab(op, vocab, padded_vocab); !s.ok()) return s;
  return check_not_null(op, {{"logits", logits}, {"targets", targets}, {"loss", loss}, {"lse", lse}});
}

absl::Status validate_cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                             int64_t vocab, int64_t padded_vocab, float grad_loss,
                                             const void* grad_logits, DType act) {
  constexpr const char* op = "cross_entropy_backward";
  if (auto s = check_activation_type(op, act); !s.ok()) return s;
  if (auto s = check_tensor_dims(op, {{"rows", rows}, {"vocab", vocab}}); !s.ok()) return s;
  if (auto s = check_padded_vocab(op, vocab, padded_vocab); !s.ok()) return s;
  if (!std::isfinite(grad_loss)) return invalid(op, "grad_loss must be finite, got ", grad_loss);
  return check_not_null(op, {{"logits", logits}, {"targets", targets}, {"lse", lse}, {"grad_logits", grad_logits}});
}

absl::Status validate_adamw(const AdamWHyperparams& h, int64_t step, const RowAmaxes& param_row_amax,
                            const float* param, const float* grad, const float* m, const float* v, int64_t n) {
  constexpr const char* op = "adamw_step";
  if (auto s = check_tensor_dims(op, {{"n", n}}); !s.ok()) return s;
  // Written as !(ok) so that NaN fails too. torch.optim.AdamW's ranges, except that eps
  // must be positive: with eps = 0 a parameter whose gradient is 0 would get 0/0.
  if (!(h.lr >= 0.0f) || !std::isfinite(h.lr)) return invalid(op, "lr must be finite and >= 0, got ", h.lr);
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f)) return invalid(op, "beta1 must be in [0, 1), got ", h.beta1);
  if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f)) return invalid(op, "beta2 must be in [0, 1), got ", h.beta2);
  if (!(h.eps > 0.0f) || !std::isfinite(h.eps)) return invalid(op, "eps must be positive and finite, got ", h.eps);
  if (!(h.weight_decay >= 0.0f) || !std::isfinite(h.weight_decay)) {
    return invalid(op, "weight_decay must be finite and >= 0, got ", h.weight_decay);
  }
  if (!(h.grad_scale >= 0.0f) || !std::isfinite(h.grad_scale)) {
    return invalid(op, "grad_scale must be finite and >= 0, got ", h.grad_scale);
  }
  if (h.grad_scale_in != nullptr && h.grad_scale != 1.0f) {
    return invalid(op, "grad_scale must be 1 with grad_scale_in (the factor comes from there), got ", h.grad_scale);
  }
  if (step < 1) return invalid(op, "step counts from 1, got ", step);
  if (auto s = check_row_amaxes(op, "param_row_amax", n, param_row_amax); !s.ok()) return s;
  return check_not_null(op, {{"param", param}, {"grad", grad}, {"m", m}, {"v", v}});
}

absl::Status validate_sum_of_squares(const float* x, int64_t n) {
  return check_elementwise("sum_of_squares", n, {{"x", x}});
}

absl::Status validate_grad_norm(double max_norm, const double* sum_of_squares, const float* clip_scale,
                                const char* op) {
  if (!(max_norm >= 0.0) || !std::isfinite(max_norm)) {
    return invalid(op, "max_norm must be finite and >= 0, got ", max_norm);
  }
  return check_not_null(op, {{"sum_of_squares", sum_of_squares}, {"clip_scale", clip_scale}});
}

absl::Status check_token_ids(const char* op, const int32_t* tokens, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid(op, "token ", tokens[i], " at position ", i, " is outside the vocabulary of ", vocab);
    }
  }
  return absl::OkStatus();
}

absl::Status check_targets(const char* op, const int32_t* targets, int64_t rows, int64_t vocab) {
  for (int64_t i = 0; i < rows; ++i) {
    if (targets[i] != kIgnoreTarget && (targets[i] < 0 || targets[i] >= vocab)) {
      return invalid(op, "target ", targets[i], " at row ", i, " is outside the vocabulary of ", vocab, " (use ",
                     kIgnoreTarget, " to ignore a row)");
    }
  }
  return absl::OkStatus();
}

}  // namespace fp8::ops
