#include "tests/ops/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "fp8/arith.h"

namespace fp8::ops_test {
namespace {

// |a − b|, with NaN (an entry the op failed to write, or a broken formula) as infinitely wrong.
double abs_error(float a, double b) {
  const double err = std::abs(static_cast<double>(a) - b);
  return std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
}

}  // namespace

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> nans(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

Vec to_double(const std::vector<float>& x) { return Vec(x.begin(), x.end()); }

double weighted_sum(const Vec& y, const std::vector<float>& w) {
  EXPECT_EQ(y.size(), w.size());
  double sum = 0.0;
  for (size_t i = 0; i < y.size(); ++i) sum += y[i] * static_cast<double>(w[i]);
  return sum;
}

Vec numeric_gradient(const std::function<double(const Vec&)>& f, Vec x, const std::vector<size_t>& indices, double h) {
  std::vector<size_t> all;
  if (indices.empty()) {
    all.resize(x.size());
    std::iota(all.begin(), all.end(), size_t{0});
  }
  Vec grad(x.size(), 0.0);
  for (size_t i : indices.empty() ? all : indices) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f(x);
    x[i] = saved - h;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

std::vector<size_t> sample_indices(size_t n, size_t count, uint32_t seed) {
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min(n, count));
  return all;
}

void expect_gradient_near(const std::vector<float>& analytic, const Vec& numeric, const std::string& what,
                          const std::vector<size_t>& indices, double tol) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  std::vector<size_t> all;
  if (indices.empty()) {
    all.resize(numeric.size());
    std::iota(all.begin(), all.end(), size_t{0});
  }
  const auto& checked = indices.empty() ? all : indices;
  double scale = 1.0;
  for (size_t i : checked) scale = std::max(scale, std::abs(numeric[i]));
  double worst = -1.0;
  size_t worst_i = 0;
  for (size_t i : checked) {
    const double err = abs_error(analytic[i], numeric[i]);
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst entry " << worst_i << " analytic " << analytic[worst_i]
                                << " numeric " << numeric[worst_i] << " (scale " << scale << ")";
}

double scaled_max_error(const std::vector<float>& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1.0;
  for (double x : b) scale = std::max(scale, std::abs(x));
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, abs_error(a[i], b[i]));
  return worst / scale;
}

std::vector<float> row_amaxes(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> amax(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float& m = amax[static_cast<size_t>(r)];
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::fabs(x[static_cast<size_t>(r * cols + j)]));
  }
  return amax;
}

std::vector<float> stored_row_amaxes(const void* x, DType act, int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    values[i] =
        act == DType::kBFloat16 ? bf16_to_float(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
  }
  return row_amaxes(values, rows, cols);
}

}  // namespace fp8::ops_test
