// Puts this project's reading of Hopper's wgmma (shared-memory descriptors, swizzles, the
// register layouts of A fragments and accumulators) to the hardware: wgmma_probe.h. A gpu
// test; it skips, saying why, without an sm_90 GPU.
//
// Each probe runs in a child process of its own: a descriptor the hardware reads otherwise
// than intended may fault, and a fault poisons the process's CUDA context for every probe
// after it. The parent never touches CUDA.
#include "tests/kernels/wgmma_probe.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"

namespace fp8::testing::wgmma_probe {
namespace {

// Small integers, so that every product and sum is exact in bf16 and fp32.
std::vector<uint16_t> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-3, 3);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(static_cast<float>(value(rng)));
  return v;
}

std::vector<float> product(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int k) {
  std::vector<float> d(64 * 64, 0.0f);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      for (int i = 0; i < k; ++i) d[m * 64 + n] += bf16_to_float(a[m * k + i]) * bf16_to_float(b[i * 64 + n]);
    }
  }
  return d;
}

// run(p, a, b) in a child process: the outcome, its message and the product come back
// through a pipe.
Result run_isolated(Probe p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  Result r;
  int fds[2];
  if (pipe(fds) != 0) {
    r.message = "pipe failed";
    return r;
  }
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    const Result got = run(p, a, b);
    const int outcome = static_cast<int>(got.outcome);
    const uint32_t message_size = static_cast<uint32_t>(got.message.size());
    const uint32_t values = static_cast<uint32_t>(got.d.size());
    bool ok = write(fds[1], &outcome, sizeof outcome) == sizeof outcome &&
              write(fds[1], &message_size, sizeof message_size) == sizeof message_size &&
              write(fds[1], got.message.data(), message_size) == static_cast<ssize_t>(message_size) &&
              write(fds[1], &values, sizeof values) == sizeof values;
    if (values > 0) ok = ok && write(fds[1], got.d.data(), values * sizeof(float)) > 0;
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  auto read_all = [&](void* dst, size_t bytes) {
    auto* p8 = static_cast<char*>(dst);
    while (bytes > 0) {
      const ssize_t n = read(fds[0], p8, bytes);
      if (n <= 0) return false;
      p8 += n;
      bytes -= static_cast<size_t>(n);
    }
    return true;
  };
  int outcome = static_cast<int>(Outcome::kCudaError);
  uint32_t message_size = 0, values = 0;
  bool ok = read_all(&outcome, sizeof outcome) && read_all(&message_size, sizeof message_size);
  if (ok) {
    r.message.resize(message_size);
    ok = read_all(r.message.data(), message_size) && read_all(&values, sizeof values);
  }
  if (ok && values > 0) {
    r.d.resize(values);
    ok = read_all(r.d.data(), values * sizeof(float));
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!ok) {
    r.outcome = Outcome::kCudaError;
    r.message = "the probe's process died (status " + std::to_string(status) + ")";
    return r;
  }
  r.outcome = static_cast<Outcome>(outcome);
  return r;
}

// "exact", or what differs: how many entries, the first few, and whether the result is the
// product transposed (a hint at which reading failed).
std::string compare(const std::vector<float>& got, const std::vector<float>& want) {
  int wrong = 0;
  bool transposed = true;
  std::string first;
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 64; ++n) {
      const float g = got[m * 64 + n], w = want[m * 64 + n];
      if (g != want[n * 64 + m]) transposed = false;
      if (g == w) continue;
      if (++wrong <= 4) {
        char buf[96];
        std::snprintf(buf, sizeof buf, " [%d,%d] %g (want %g)", m, n, static_cast<double>(g), static_cast<double>(w));
        first += buf;
      }
    }
  }
  if (wrong == 0) return "exact";
  return std::to_string(wrong) + " of 4096 differ:" + first + (transposed ? "; it is the product transposed" : "");
}

// Which element of B the hardware took for each (k, n), where a probe went wrong: A
// one-hot (row m holds 1 at column m % K, so D[m][n] is the B element that the hardware read
// for k = m % K, column n), and B holding its own column (then row) index plus one, so that D
// names the column (row) that was read. Small integers: exact in bf16 and fp32. Prints the
// map at a few places, so that one GPU run says how a reading differs, not only that it
// does. Meaningful where the A fragments are right (probe kRegisterAKMajor).
void print_what_was_read(Probe p) {
  const int k = probe_k(p);
  std::vector<uint16_t> a(static_cast<size_t>(64 * k), float_to_bf16(0.0f));
  for (int m = 0; m < 64; ++m) a[static_cast<size_t>(m * k + m % k)] = float_to_bf16(1.0f);
  std::vector<uint16_t> by_column(static_cast<size_t>(k * 64)), by_row(by_column.size());
  for (int r = 0; r < k; ++r) {
    for (int c = 0; c < 64; ++c) {
      by_column[static_cast<size_t>(r * 64 + c)] = float_to_bf16(static_cast<float>(c + 1));
      by_row[static_cast<size_t>(r * 64 + c)] = float_to_bf16(static_cast<float>(r + 1));
    }
  }
  const Result columns = run_isolated(p, a, by_column), rows = run_isolated(p, a, by_row);
  if (columns.outcome != Outcome::kRan || rows.outcome != Outcome::kRan) {
    std::printf("  (what was read: the decoding runs failed: %s%s)\n", columns.message.c_str(), rows.message.c_str());
    return;
  }
  std::string map;
  for (int m : {0, 1, 7, 8, 9, 15, k - 1}) {
    for (int n : {0, 1, 7, 8, 9, 63}) {
      const auto at = static_cast<size_t>(m * 64 + n);
      char buf[64];
      std::snprintf(buf, sizeof buf, " (%d,%d)->(%g,%g)", m % k, n, static_cast<double>(rows.d[at] - 1),
                    static_cast<double>(columns.d[at] - 1));
      map += buf;
    }
  }
  std::printf("  what the hardware read for B(k,n): (k,n) -> (k',n'), -1 for a zero:%s\n", map.c_str());
}

TEST(WgmmaProbe, EachReadingOfTheDescriptorsAndFragmentsAgainstTheHardware) {
  bool matched[kProbes] = {};
  for (int i = 0; i < kProbes; ++i) {
    const auto p = static_cast<Probe>(i);
    const int k = probe_k(p);
    const auto n = static_cast<size_t>(64 * k);
    const auto a = small_integers(n, 11 + i), b = small_integers(n, 29 + i);
    const Result r = run_isolated(p, a, b);
    if (r.outcome == Outcome::kNoDevice || r.outcome == Outcome::kNotHopper) GTEST_SKIP() << r.message;
    const std::string verdict = r.outcome == Outcome::kRan ? compare(r.d, product(a, b, k)) : "failed: " + r.message;
    matched[i] = verdict == "exact";
    std::printf("wgmma probe %d (%s): %s\n", i, probe_name(p), verdict.c_str());
    if (r.outcome == Outcome::kRan && !matched[i]) print_what_was_read(p);
  }
  // The attention kernels use the default MN-major reading, the one the GPUs tried share
  // (bench/RESULTS.md).
  if (matched[static_cast<int>(Probe::kMnMajorSwizzle128)]) {
    std::printf("wgmma MN-major reading: default\n");
  } else if (matched[static_cast<int>(Probe::kMnMajorSwizzle128Exchanged)]) {
    std::printf("wgmma MN-major reading: exchanged (the attention kernels read the default one)\n");
  }
  // What the attention kernels would build on: A fragments and accumulators as mma.sync's,
  // K-major B without and with the 128-byte swizzle, and one reading of each MN-major pair.
  EXPECT_TRUE(matched[static_cast<int>(Probe::kSharedAKMajor)]);
  EXPECT_TRUE(matched[static_cast<int>(Probe::kRegisterAKMajor)]);
  EXPECT_TRUE(matched[static_cast<int>(Probe::kKMajorSwizzle128)]);
  EXPECT_TRUE(matched[static_cast<int>(Probe::kMnMajorLboAlongN)] ||
              matched[static_cast<int>(Probe::kMnMajorLboAlongK)])
      << "neither reading of a transposed B without swizzle";
  EXPECT_TRUE(matched[static_cast<int>(Probe::kMnMajorSwizzle128)])
      << "the attention kernels' reading of a transposed B with the 128-byte swizzle";
}

}  // namespace
}  // namespace fp8::testing::wgmma_probe
