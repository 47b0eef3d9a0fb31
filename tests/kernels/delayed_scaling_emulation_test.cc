// The CUDA backend's delayed-scaling kernel (kernels/cuda/delayed_scaling_device.cuh) run
// on the CPU under the emulation of CUDA threads (tests/ops/emulation/): over several
// blocks, each cast's state and next scales are bit for bit what the host's
// delayed::record gives. The same kernel on a GPU: fp8_cuda_contract_test.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernel, after the emulation.
#include "cuda/delayed_scaling_device.cuh"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::cuda::delayed_device {
namespace {

TEST(DelayedScalingEmulation, EveryThreadRecordsItsCastAsTheHostDoes) {
  constexpr int kHistory = 4;
  constexpr int64_t kCasts = 2 * kThreads + 37;  // three blocks, the last one partial
  constexpr int64_t kStride = 8, kInverse = 4;
  const int64_t each = delayed::state_floats(kHistory);
  std::vector<float> states(static_cast<size_t>(kCasts * each)), host(states.size());
  for (int64_t i = 0; i < kCasts; ++i) {
    delayed::init_state(states.data() + i * each, kHistory, i % 2 == 0 ? Format::kE4M3 : Format::kE5M2, i % 3 == 0);
  }
  host = states;
  // A NaN past the last cast's scales: a thread that wrote beyond its cast would show.
  std::vector<float> scales(static_cast<size_t>(kCasts * kStride + 1), std::numeric_limits<float>::quiet_NaN());
  std::mt19937 rng(11);
  std::lognormal_distribution<float> magnitude(0.0f, 4.0f);
  for (int step = 0; step < 7; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<float> amaxes(static_cast<size_t>(kCasts));
    for (int64_t i = 0; i < kCasts; ++i) {
      // Some zeros and non-finite amaxes among ordinary ones.
      const int64_t k = (i + step) % 29;
      amaxes[static_cast<size_t>(i)] = k == 0   ? 0.0f
                                       : k == 1 ? std::numeric_limits<float>::infinity()
                                       : k == 2 ? std::numeric_limits<float>::quiet_NaN()
                                                : magnitude(rng);
    }
    emulation::launch(static_cast<unsigned>((kCasts + kThreads - 1) / kThreads), kThreads, 0, record_delayed_kernel,
                      states.data(), kCasts, kHistory, static_cast<const float*>(amaxes.data()), scales.data(),
                      kStride, kInverse);
    for (int64_t i = 0; i < kCasts; ++i) {
      float* h = host.data() + i * each;
      delayed::record(h, amaxes[static_cast<size_t>(i)]);
      for (int64_t f = 0; f < each; ++f) {
        ASSERT_EQ(float_bits(states[static_cast<size_t>(i * each + f)]), float_bits(h[f])) << "cast " << i;
      }
      const float want = h[delayed::kHasScale] != 0.0f ? h[delayed::kScale] : 1.0f;
      ASSERT_EQ(scales[static_cast<size_t>(i * kStride)], want) << "cast " << i;
      ASSERT_EQ(scales[static_cast<size_t>(i * kStride + kInverse)], inverse_scale(want)) << "cast " << i;
    }
    EXPECT_TRUE(std::isnan(scales.back()));
  }
}

}  // namespace
}  // namespace fp8::cuda::delayed_device
