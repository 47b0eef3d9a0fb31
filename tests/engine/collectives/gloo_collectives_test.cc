// The Gloo process group over loopback with 1, 2 and 4 real processes: every collective
// gives the exact expected values, reductions fold ranks in order 0..W-1 (so the result is
// the same bits as a sequential fold, on every rank and in every run).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/collectives/multi_process.h"
#include "tests/engine/collectives/rank_checks.h"
#include "tests/engine/collectives/scratch_dir.h"
#include "fp8/arith.h"
#include "worker/engine/collectives/gloo_process_group.h"

namespace fp8::engine::collectives {
namespace {

using test::RankChecks;
using test::RankReport;

constexpr absl::Duration kTimeout = absl::Seconds(20);

// The sequential fold every reduction must match bit for bit.
template <typename T>
T fold(ReduceOp op, int world, const std::function<T(int rank)>& value_of) {
  T acc = value_of(0);
  for (int r = 1; r < world; ++r) {
    const T next = value_of(r);
    acc = op == ReduceOp::kSum ? acc + next : ((acc < next || std::isnan(next)) ? next : acc);
  }
  return acc;
}

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// FNV-1a over the bytes: a short fingerprint to compare results across ranks.
template <typename T>
std::string digest(const std::vector<T>& values) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(T); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return absl::StrCat(h);
}

void check_all_gather(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  auto byte_of = [](int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i * 3 + 1); };

  constexpr size_t kOdd = 7;
  std::vector<uint8_t> send(kOdd);
  for (size_t i = 0; i < kOdd; ++i) send[i] = byte_of(r, i);
  std::vector<uint8_t> recv(kOdd * w, 0xEE);
  if (c.expect_ok(pg.all_gather(send.data(), recv.data(), kOdd), "all_gather")) {
    for (int q = 0; q < w; ++q) {
      for (size_t i = 0; i < kOdd; ++i) {
        c.expect(recv[q * kOdd + i] == byte_of(q, i), absl::StrCat("all_gather: byte ", i, " of rank ", q));
      }
    }
  }

  // In place: each rank's block already sits in its slot of the output.
  std::vector<uint8_t> buffer(kOdd * w, 0xEE);
  for (size_t i = 0; i < kOdd; ++i) buffer[r * kOdd + i] = byte_of(r, i);
  if (c.expect_ok(pg.all_gather(buffer.data() + r * kOdd, buffer.data(), kOdd), "in-place all_gather")) {
    for (int q = 0; q < w; ++q) {
      for (size_t i = 0; i < kOdd; ++i) {
        c.expect(buffer[q * kOdd + i] == byte_of(q, i), absl::StrCat("in-place all_gather: byte ", i, " of rank ", q));
      }
    }
  }

  // A megabyte per rank: several socket buffers' worth.
  constexpr size_t kLarge = size_t{1} << 20;
  std::vector<uint8_t> big(kLarge);
  for (size_t i = 0; i < kLarge; ++i) big[i] = static_cast<uint8_t>((r * 131 + i * 7) >> 2);
  std::vector<uint8_t> gathered(kLarge * w);
  if (c.expect_ok(pg.all_gather(big.data(), gathered.data(), kLarge), "large all_gather")) {
    size_t wrong = 0;
    for (int q = 0; q < w; ++q) {
      for (size_t i = 0; i < kLarge; ++i) wrong += gathered[q * kLarge + i] != static_cast<uint8_t>((q * 131 + i * 7) >> 2);
    }
    c.expect(wrong == 0, absl::StrCat("large all_gather: ", wrong, " wrong bytes"));
  }
  c.expect_ok(pg.all_gather(nullptr, nullptr, 0), "empty all_gather");
}

void check_reduce_scatter(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  constexpr int64_t kCount = 5;

  // Sum of small integers: exact. Rank q sends (q+1)*1000 + j at index j.
  std::vector<float> send(kCount * w);
  for (int64_t j = 0; j < kCount * w; ++j) send[j] = static_cast<float>((r + 1) * 1000 + j);
  std::vector<float> recv(kCount, -1.0f);
  if (c.expect_ok(pg.reduce_scatter(send.data(), recv.data(), kCount, ReduceOp::kSum), "reduce_scatter sum")) {
    for (int64_t i = 0; i < kCount; ++i) {
      const float expected = static_cast<float>(1000 * w * (w + 1) / 2 + w * (r * kCount + i));
      c.expect(recv[i] == expected, absl::StrCat("reduce_scatter sum [", i, "] = ", recv[i], ", want ", expected));
    }
  }

  auto max_input = [](int rank, int64_t j) { return static_cast<float>((j * 7 + rank * 13) % 17) - 8.0f; };
  for (int64_t j = 0; j < kCount * w; ++j) send[j] = max_input(r, j);
  if (c.expect_ok(pg.reduce_scatter(send.data(), recv.data(), kCount, ReduceOp::kMax), "reduce_scatter max")) {
    for (int64_t i = 0; i < kCount; ++i) {
      float expected = -1e30f;
      for (int q = 0; q < w; ++q) expected = std::max(expected, max_input(q, r * kCount + i));
      c.expect(recv[i] == expected, absl::StrCat("reduce_scatter max [", i, "] = ", recv[i], ", want ", expected));
    }
  }

  // Inexact sums over a large buffer: the bits of a fold in rank order.
  constexpr int64_t kLarge = 300001;
  auto inexact = [](int rank, int64_t j) { return std::sin(0.37f * static_cast<float>(rank) + 0.001f * j) / 3.0f; };
  std::vector<float> big(kLarge * w);
  for (int64_t j = 0; j < kLarge * w; ++j) big[j] = inexact(r, j);
  std::vector<float> slice(kLarge);
  if (c.expect_ok(pg.reduce_scatter(big.data(), slice.data(), kLarge, ReduceOp::kSum), "large reduce_scatter")) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kLarge; ++i) {
      const float expected = fold<float>(ReduceOp::kSum, w, [&](int q) { return inexact(q, r * kLarge + i); });
      wrong += !same_bits(slice[i], expected);
    }
    c.expect(wrong == 0, absl::StrCat("large reduce_scatter: ", wrong, " elements differ from the rank-order fold"));
  }
}

// Several all-gathers and reduce-scatters in one call each (Gloo: one after another), an
// empty part among them: every part what its own call gives.
void check_parts(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  auto byte_of = [](size_t part, int rank, size_t i) { return static_cast<uint8_t>(part * 59 + rank * 31 + i * 3); };
  const size_t sizes[] = {5, 0, 9};
  std::vector<std::vector<uint8_t>> sends, recvs;
  std::vector<AllGatherPart> gathers;
  for (size_t k = 0; k < std::size(sizes); ++k) {
    sends.emplace_back(sizes[k]);
    for (size_t i = 0; i < sizes[k]; ++i) sends[k][i] = byte_of(k, r, i);
    recvs.emplace_back(sizes[k] * w, 0xEE);
  }
  for (size_t k = 0; k < std::size(sizes); ++k) gathers.push_back({sends[k].data(), recvs[k].data(), sizes[k]});
  if (c.expect_ok(pg.all_gather_parts(gathers), "all_gather_parts")) {
    for (size_t k = 0; k < std::size(sizes); ++k) {
      for (int q = 0; q < w; ++q) {
        for (size_t i = 0; i < sizes[k]; ++i) {
          c.expect(recvs[k][q * sizes[k] + i] == byte_of(k, q, i),
                   absl::StrCat("all_gather_parts: part ", k, ", byte ", i, " of rank ", q));
        }
      }
    }
  }

  // Part k: rank q sends (k + 1) * 100 + q * 10 + j at index j (exact sums).
  const int64_t counts[] = {3, 0, 4};
  std::vector<std::vector<float>> in, out;
  std::vector<ReduceScatterPart> scatters;
  for (size_t k = 0; k < std::size(counts); ++k) {
    in.emplace_back(counts[k] * w);
    for (int64_t j = 0; j < counts[k] * w; ++j) in[k][j] = static_cast<float>((k + 1) * 100 + r * 10 + j);
    out.emplace_back(counts[k], -1.0f);
  }
  for (size_t k = 0; k < std::size(counts); ++k) scatters.push_back({in[k].data(), out[k].data(), counts[k]});
  if (c.expect_ok(pg.reduce_scatter_parts(scatters, ReduceOp::kSum), "reduce_scatter_parts")) {
    for (size_t k = 0; k < std::size(counts); ++k) {
      for (int64_t i = 0; i < counts[k]; ++i) {
        float want = 0;
        for (int q = 0; q < w; ++q) want += static_cast<float>((k + 1) * 100 + q * 10 + r * counts[k] + i);
        c.expect(out[k][i] == want, absl::StrCat("reduce_scatter_parts: part ", k, " [", i, "] = ", out[k][i],
                                                 ", want ", want));
      }
    }
  }
}

// Returns fingerprints of the inexact results, which must agree across ranks.
std::string check_all_reduce(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  std::string fingerprints;

  std::vector<float> small = {1.0f * (r + 1), 2.0f * (r + 1), 3.0f * (r + 1)};
  if (c.expect_ok(pg.all_reduce(small.data(), 3, ReduceOp::kSum), "all_reduce sum")) {
    for (int i = 0; i < 3; ++i) {
      const float expected = static_cast<float>((i + 1) * w * (w + 1) / 2);
      c.expect(small[i] == expected, absl::StrCat("all_reduce sum [", i, "] = ", small[i], ", want ", expected));
    }
  }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> amax = {static_cast<float>(r), -static_cast<float>(r), r == w - 1 ? nan : 1.0f, 0.0f};
  if (c.expect_ok(pg.all_reduce(amax.data(), 4, ReduceOp::kMax), "all_reduce max")) {
    c.expect(amax[0] == static_cast<float>(w - 1), absl::StrCat("all_reduce max [0] = ", amax[0]));
    c.expect(amax[1] == 0.0f, absl::StrCat("all_reduce max [1] = ", amax[1]));
    c.expect(std::isnan(amax[2]), absl::StrCat("all_reduce max [2] = ", amax[2], ", want NaN (it propagates)"));
    c.expect(amax[3] == 0.0f, absl::StrCat("all_reduce max [3] = ", amax[3]));
  }

  // Large (past the one-round size, and not a multiple of the world size): rank-order bits.
  constexpr int64_t kLarge = 100003;
  auto inexact = [](int rank, int64_t i) { return 1.0f / static_cast<float>(3 + rank + i % 97) + 1e-3f * (i % 11); };
  std::vector<float> big(kLarge);
  for (int64_t i = 0; i < kLarge; ++i) big[i] = inexact(r, i);
  if (c.expect_ok(pg.all_reduce(big.data(), kLarge, ReduceOp::kSum), "large all_reduce sum")) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kLarge; ++i) {
      wrong += !same_bits(big[i], fold<float>(ReduceOp::kSum, w, [&](int q) { return inexact(q, i); }));
    }
    c.expect(wrong == 0, absl::StrCat("large all_reduce sum: ", wrong, " elements differ from the rank-order fold"));
    absl::StrAppend(&fingerprints, "float-sum:", digest(big), " ");
  }
  for (int64_t i = 0; i < kLarge; ++i) big[i] = inexact(r, i) * ((i + r) % 3 == 0 ? -1.0f : 1.0f);
  if (c.expect_ok(pg.all_reduce(big.data(), kLarge, ReduceOp::kMax), "large all_reduce max")) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kLarge; ++i) {
      const float expected =
          fold<float>(ReduceOp::kMax, w, [&](int q) { return inexact(q, i) * ((i + q) % 3 == 0 ? -1.0f : 1.0f); });
      wrong += !same_bits(big[i], expected);
    }
    c.expect(wrong == 0, absl::StrCat("large all_reduce max: ", wrong, " elements wrong"));
  }

  // Doubles, small (one round) and large (two rounds).
  auto tenth = [](int rank) { return 0.1 * (rank + 1); };
  std::vector<double> d = {tenth(r), 1e-17 * (r + 1)};
  if (c.expect_ok(pg.all_reduce(d.data(), 2, ReduceOp::kSum), "double all_reduce sum")) {
    c.expect(same_bits(d[0], fold<double>(ReduceOp::kSum, w, tenth)), absl::StrCat("double all_reduce [0] = ", d[0]));
    c.expect(same_bits(d[1], fold<double>(ReduceOp::kSum, w, [](int q) { return 1e-17 * (q + 1); })),
             absl::StrCat("double all_reduce [1] = ", d[1]));
    absl::StrAppend(&fingerprints, "double-small:", digest(d), " ");
  }
  constexpr int64_t kLargeDouble = 10007;  // 80 KB: two rounds
  auto third = [](int rank, int64_t i) { return 1.0 / (3.0 + rank + static_cast<double>(i)); };
  std::vector<double> dbig(kLargeDouble);
  for (int64_t i = 0; i < kLargeDouble; ++i) dbig[i] = third(r, i);
  if (c.expect_ok(pg.all_reduce(dbig.data(), kLargeDouble, ReduceOp::kSum), "large double all_reduce")) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kLargeDouble; ++i) {
      wrong += !same_bits(dbig[i], fold<double>(ReduceOp::kSum, w, [&](int q) { return third(q, i); }));
    }
    c.expect(wrong == 0, absl::StrCat("large double all_reduce: ", wrong, " elements differ"));
    absl::StrAppend(&fingerprints, "double-large:", digest(dbig), " ");
  }
  for (int64_t i = 0; i < kLargeDouble; ++i) dbig[i] = (i % 5 == r % 5) ? 1.0 * r : -1.0;
  if (c.expect_ok(pg.all_reduce(dbig.data(), kLargeDouble, ReduceOp::kMax), "large double all_reduce max")) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < kLargeDouble; ++i) {
      double expected = -1.0;
      for (int q = 0; q < w; ++q) expected = std::max(expected, (i % 5 == q % 5) ? 1.0 * q : -1.0);
      wrong += dbig[i] != expected;
    }
    c.expect(wrong == 0, absl::StrCat("large double all_reduce max: ", wrong, " elements wrong"));
  }
  return fingerprints;
}

// bf16 sums (fsdp.reduce_dtype): values widened, summed in fp32 in rank order, rounded to
// bf16 once. The values are chosen so that rounding after each addition would differ: 1
// plus W-1 halves of a bf16 ulp of 1 rounds back to 1 one addition at a time, but not all
// at once (from 4 ranks). Two parts, one of them empty, in one call.
void check_bf16_reduce_scatter(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  constexpr int64_t kCount = 5;
  const float half_ulp = 1.0f / 256.0f;  // bf16 keeps 8 significant bits: its ulp at 1 is 2^-7
  auto value = [&](int q, int64_t i) { return q == 0 ? 1.0f + static_cast<float>(i) : half_ulp; };
  std::vector<uint16_t> send(static_cast<size_t>(kCount * w)), recv(kCount, 0xFFFF);
  for (int64_t j = 0; j < kCount * w; ++j) send[static_cast<size_t>(j)] = float_to_bf16(value(r, j % kCount));
  const Bf16ReduceScatterPart parts[] = {{send.data(), recv.data(), kCount}, {nullptr, nullptr, 0}};
  if (!c.expect_ok(pg.reduce_scatter_bf16_parts(parts), "reduce_scatter_bf16_parts")) return;
  for (int64_t i = 0; i < kCount; ++i) {
    float sum = 0;
    for (int q = 0; q < w; ++q) sum += bf16_to_float(float_to_bf16(value(q, i)));
    const uint16_t want = float_to_bf16(sum);
    c.expect(recv[static_cast<size_t>(i)] == want,
             absl::StrCat("bf16 reduce_scatter [", i, "] = ", bf16_to_float(recv[static_cast<size_t>(i)]), ", want ",
                          bf16_to_float(want)));
  }
}

void check_broadcast_and_barrier(ProcessGroup& pg, RankChecks& c) {
  const int r = pg.rank();
  const int w = pg.size();
  for (const int root : {w - 1, 0}) {
    std::vector<uint8_t> data(1000, 0);
    if (r == root) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 13 + root + 1);
    }
    if (c.expect_ok(pg.broadcast(data.data(), data.size(), root), absl::StrCat("broadcast from ", root))) {
      size_t wrong = 0;
      for (size_t i = 0; i < data.size(); ++i) wrong += data[i] != static_cast<uint8_t>(i * 13 + root + 1);
      c.expect(wrong == 0, absl::StrCat("broadcast from ", root, ": ", wrong, " wrong bytes"));
    }
  }
  c.expect_ok(pg.barrier(), "barrier");
  c.expect_ok(pg.barrier(), "second barrier");
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, EveryCollectiveGivesTheExpectedValuesOnEveryRank) {
  const int world = GetParam();
  test::ScratchDir scratch;
  ASSERT_TRUE(scratch.ok());
  const std::string store_dir = (scratch.path() / "rdzv").string();

  auto outcomes = test::run_ranks(
      world,
      [&](int rank) {
        RankChecks c;
        RankReport report;
        auto group = test::join_group(store_dir, rank, world, kTimeout);
        if (!c.expect_ok(group.status(), "join")) return RankReport{c.text(), ""};
        ProcessGroup& pg = **group;
        c.expect(pg.rank() == rank && pg.size() == world && pg.backend_name() == "gloo", "rank/size/backend");
        check_all_gather(pg, c);
        check_reduce_scatter(pg, c);
        check_parts(pg, c);
        check_bf16_reduce_scatter(pg, c);
        report.output = check_all_reduce(pg, c);
        check_broadcast_and_barrier(pg, c);
        report.errors = c.text();
        return report;
      },
      scratch.path().string());

  for (const auto& outcome : outcomes) EXPECT_EQ(outcome.problems(), "");
  for (const auto& outcome : outcomes) {
    EXPECT_EQ(outcome.report.output, outcomes[0].report.output) << "rank " << outcome.rank << " got other bits";
  }
  EXPECT_FALSE(outcomes[0].report.output.empty());
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCollectivesTest, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Ranks"); });

}  // namespace
}  // namespace fp8::engine::collectives
