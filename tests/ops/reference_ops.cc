#include "tests/ops/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fp8::ops_test::ref {

Vec embedding(const std::vector<int32_t>& tokens, const Vec& table, int64_t dim) {
  Vec out;
  for (int32_t t : tokens) out.insert(out.end(), table.begin() + t * dim, table.begin() + (t + 1) * dim);
  return out;
}

Vec rmsnorm(const Vec& x, const Vec& weight, int64_t rows, int64_t dim, double eps, Vec* inv_rms) {
  Vec out(x.size());
  if (inv_rms != nullptr) inv_rms->assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean_square = 0.0;
    for (int64_t j = 0; j < dim; ++j) mean_square += x[r * dim + j] * x[r * dim + j];
    mean_square /= static_cast<double>(dim);
    const double inv = 1.0 / std::sqrt(mean_square + eps);
    if (inv_rms != nullptr) (*inv_rms)[r] = inv;
    for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = x[r * dim + j] * inv * weight[j];
  }
  return out;
}

Vec rope(const Vec& x, const RopeShape& s, double theta, bool inverse) {
  Vec out(x.size());
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t pos = 0; pos < s.seq; ++pos) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t base = ((b * s.seq + pos) * s.heads + h) * s.head_dim;
        for (int64_t i = 0; i < s.head_dim / 2; ++i) {
          double angle = static_cast<double>(pos) *
                         std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
          if (inverse) angle = -angle;
          const double x0 = x[base + 2 * i], x1 = x[base + 2 * i + 1];
          out[base + 2 * i] = x0 * std::cos(angle) - x1 * std::sin(angle);
          out[base + 2 * i + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
      }
    }
  }
  return out;
}

AttentionResult attention(const Vec& q, const Vec& k, const Vec& v, const AttentionShape& s) {
  const int64_t S = s.seq, D = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto q_at = [&](int64_t b, int64_t pos, int64_t h) { return ((b * S + pos) * s.n_heads + h) * D; };
  auto kv_at = [&](int64_t b, int64_t pos, int64_t h) { return ((b * S + pos) * s.n_kv_heads + h) * D; };
  AttentionResult r{Vec(q.size(), 0.0), Vec(static_cast<size_t>(s.batch * s.n_heads * S), 0.0)};
  Vec probs(static_cast<size_t>(S * S));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t kvh = h / group;
      // The whole [seq, seq] matrix: scores, −∞ above the diagonal, softmax per row.
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += q[q_at(b, i, h) + d] * k[kv_at(b, j, kvh) + d];
          probs[i * S + j] = j <= i ? dot * scale : -std::numeric_limits<double>::infinity();
        }
        const double max = *std::max_element(probs.begin() + i * S, probs.begin() + (i + 1) * S);
        double sum = 0.0;
        for (int64_t j = 0; j < S; ++j) sum += std::exp(probs[i * S + j] - max);
        const double lse = max + std::log(sum);
        r.lse[(b * s.n_heads + h) * S + i] = lse;
        for (int64_t j = 0; j < S; ++j) probs[i * S + j] = std::exp(probs[i * S + j] - lse);
      }
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t d = 0; d < D; ++d) r.out[q_at(b, i, h) + d] += probs[i * S + j] * v[kv_at(b, j, kvh) + d];
        }
      }
    }
  }
  return r;
}

Vec swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

Vec add(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

double cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t vocab) {
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == kIgnoreTarget) continue;
    const double* row = logits.data() + r * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - max);
    total += max + std::log(sum) - row[targets[r]];
    ++counted;
  }
  return counted == 0 ? 0.0 : total / static_cast<double>(counted);
}

Vec linear(const Vec& x, const Vec& w, int64_t rows, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double dot = 0.0;
      for (int64_t i = 0; i < in; ++i) dot += x[r * in + i] * w[o * in + i];
      y[r * out + o] = dot;
    }
  }
  return y;
}

}  // namespace fp8::ops_test::ref
