#include "ops/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "cpu/parallel.h"
#include "ops/blas_threads.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {
namespace {

// Where one head's rows live in the [batch, seq, heads, head_dim] tensors and in
// lse [batch, n_heads, seq]. A head's rows are strided: consecutive positions are
// heads * head_dim floats apart, which is the leading dimension the sgemms get.
struct Layout {
  explicit Layout(const AttentionShape& s)
      : seq(s.seq),
        n_heads(s.n_heads),
        n_kv_heads(s.n_kv_heads),
        head_dim(s.head_dim),
        group(s.n_heads / s.n_kv_heads),
        ld_q(s.n_heads * s.head_dim),
        ld_kv(s.n_kv_heads * s.head_dim),
        query_blocks((s.seq + kQueryBlock - 1) / kQueryBlock),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))) {}

  int64_t q_offset(int64_t b, int64_t h, int64_t pos) const { return (b * seq + pos) * ld_q + h * head_dim; }
  int64_t kv_offset(int64_t b, int64_t kv, int64_t pos) const { return (b * seq + pos) * ld_kv + kv * head_dim; }
  int64_t lse_offset(int64_t b, int64_t h, int64_t pos) const { return (b * n_heads + h) * seq + pos; }

  int64_t seq, n_heads, n_kv_heads, head_dim, group, ld_q, ld_kv, query_blocks;
  float scale;  // of the scores: 1 / sqrt(head_dim)
};

// One query block: rows [first, first + rows) of a head. Causality means it sees keys
// [0, first + rows) only, and row first + r sees keys [0, first + r].
struct QueryBlock {
  QueryBlock(int64_t index, int64_t seq)
      : first(index * kQueryBlock), rows(std::min(kQueryBlock, seq - index * kQueryBlock)), keys(first + rows) {}
  int64_t visible(int64_t r) const { return first + r + 1; }

  int64_t first, rows, keys;
};

// Row-major C[m, n] = alpha · op(A) · op(B) + beta · C. Sizes were checked to fit in int.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// scores[r, j] = scale · q_r · k_j for the block's rows and visible keys, stride blk.keys.
void block_scores(const Layout& L, const QueryBlock& blk, const float* q_block, const float* k_head, float* scores) {
  sgemm(false, true, blk.rows, blk.keys, L.head_dim, L.scale, q_block, L.ld_q, k_head, L.ld_kv, 0.0f, scores, blk.keys);
}

// Turns one row of scores into causal softmax probabilities in place (zero past
// `visible`) and returns the row's log-sum-exp. The max is subtracted first so that exp
// never overflows; `visible` >= 1 (a row always sees its own key), so the sum is >= 1.
float causal_softmax_row(float* row, int64_t visible, int64_t keys) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < visible; ++j) max = std::max(max, row[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < visible; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < visible; ++j) row[j] *= inv_sum;
  std::fill(row + visible, row + keys, 0.0f);
  return max + static_cast<float>(std::log(sum));
}

// The forward's probabilities again, from the scores and the saved log-sum-exp.
void recompute_probabilities_row(float* row, int64_t visible, int64_t keys, float lse) {
  for (int64_t j = 0; j < visible; ++j) row[j] = std::exp(row[j] - lse);
  std::fill(row + visible, row + keys, 0.0f);
}

// Runs fn(chunk, begin, end) over the units on the thread pool. When the pool really
// splits them, OpenBLAS is held to one thread meanwhile, so that the cores are shared out
// at one level only (see blas_threads.h); a single chunk leaves OpenBLAS free to thread
// its sgemms itself.
void parallel_units(int64_t units, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (fp8::cpu::plan_chunks(units, 1) <= 1) {
    fp8::cpu::parallel_for(units, 1, fn);
    return;
  }
  SingleThreadedBlas one_blas_thread;
  fp8::cpu::parallel_for(units, 1, fn);
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                       float* lse) {
  const Layout L(s);
  const int64_t units = s.batch * s.n_heads * L.query_blocks;
  parallel_units(units, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<float> probs(static_cast<size_t>(kQueryBlock * s.seq));
    for (int64_t u = begin; u < end; ++u) {
      const QueryBlock blk(u % L.query_blocks, s.seq);
      const int64_t h = (u / L.query_blocks) % s.n_heads;
      const int64_t b = u / L.query_blocks / s.n_heads;
      const int64_t kv = h / L.group;
      block_scores(L, blk, q + L.q_offset(b, h, blk.first), k + L.kv_offset(b, kv, 0), probs.data());
      for (int64_t r = 0; r < blk.rows; ++r) {
        lse[L.lse_offset(b, h, blk.first + r)] =
            causal_softmax_row(probs.data() + r * blk.keys, blk.visible(r), blk.keys);
      }
      sgemm(false, false, blk.rows, s.head_dim, blk.keys, 1.0f, probs.data(), blk.keys, v + L.kv_offset(b, kv, 0),
            L.ld_kv, 0.0f, out + L.q_offset(b, h, blk.first), L.ld_q);
    }
  });
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* grad_out, float* grad_q, float* grad_k, float* grad_v) {
  const Layout L(s);
  parallel_units(s.batch * s.n_kv_heads, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<float> probs(static_cast<size_t>(kQueryBlock * s.seq));
    std::vector<float> grad_scores(static_cast<size_t>(kQueryBlock * s.seq));
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b = u / s.n_kv_heads;
      const int64_t kv = u % s.n_kv_heads;
      const float* k_head = k + L.kv_offset(b, kv, 0);
      const float* v_head = v + L.kv_offset(b, kv, 0);
      float* grad_k_head = grad_k + L.kv_offset(b, kv, 0);
      float* grad_v_head = grad_v + L.kv_offset(b, kv, 0);
      // Input gradients are written, not accumulated: clear this unit's rows, then sum
      // every query head and block of the group into them.
      for (int64_t pos = 0; pos < s.seq; ++pos) {
        std::fill_n(grad_k_head + pos * L.ld_kv, s.head_dim, 0.0f);
        std::fill_n(grad_v_head + pos * L.ld_kv, s.head_dim, 0.0f);
      }
      for (int64_t h = kv * L.group; h < (kv + 1) * L.group; ++h) {
        for (int64_t qb = 0; qb < L.query_blocks; ++qb) {
          const QueryBlock blk(qb, s.seq);
          const int64_t at = L.q_offset(b, h, blk.first);
          float* P = probs.data();
          float* dS = grad_scores.data();
          block_scores(L, blk, q + at, k_head, P);
          for (int64_t r = 0; r < blk.rows; ++r) {
            recompute_probabilities_row(P + r * blk.keys, blk.visible(r), blk.keys,
                                        lse[L.lse_offset(b, h, blk.first + r)]);
          }
          // grad_v[0, keys) += Pᵀ · grad_out_blk
          sgemm(true, false, blk.keys, s.head_dim, blk.rows, 1.0f, P, blk.keys, grad_out + at, L.ld_q, 1.0f,
                grad_v_head, L.ld_kv);
          // dS = P ∘ (grad_out_blk · vᵀ − delta), delta_r = grad_out_r · out_r (the softmax's Jacobian
          // applied row by row; masked entries stay 0 because P is 0 there).
          sgemm(false, true, blk.rows, blk.keys, s.head_dim, 1.0f, grad_out + at, L.ld_q, v_head, L.ld_kv, 0.0f, dS,
                blk.keys);
          for (int64_t r = 0; r < blk.rows; ++r) {
            const float delta =
                static_cast<float>(dot_double(grad_out + at + r * L.ld_q, out + at + r * L.ld_q, s.head_dim));
            float* dS_row = dS + r * blk.keys;
            const float* P_row = P + r * blk.keys;
            for (int64_t j = 0; j < blk.keys; ++j) dS_row[j] = P_row[j] * (dS_row[j] - delta);
          }
          // grad_q_blk = scale · dS · k;  grad_k[0, keys) += scale · dSᵀ · q_blk
          sgemm(false, false, blk.rows, s.head_dim, blk.keys, L.scale, dS, blk.keys, k_head, L.ld_kv, 0.0f, grad_q + at,
                L.ld_q);
          sgemm(true, false, blk.keys, s.head_dim, blk.rows, L.scale, dS, blk.keys, q + at, L.ld_q, 1.0f, grad_k_head,
                L.ld_kv);
        }
      }
    }
  });
}

}  // namespace fp8::ops::cpu
