#include <cstdio>
#include <vector>
#include "tests/engine/dist/multi_process.h"
#include "tests/engine/dist/rank_checks.h"
#include "tests/engine/dist/scratch_dir.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
using namespace fp8::engine::dist;
TEST(Bench, Run) {
  test::ScratchDir s;
  for (int world : {2, 4}) {
  auto out = test::run_ranks(world, [&](int rank) {
    auto g = test::join_group((s.path() / absl::StrCat("r", world)).string(), rank, world, absl::Seconds(60));
    if (!g.ok()) return test::RankReport{g.status().ToString(), ""};
    ProcessGroup& pg = **g;
    std::string out;
    const size_t total = 100u << 20;  // 100 MB gathered / reduced
    std::vector<uint8_t> shard(total / world, 1), full(total);
    std::vector<float> f(total / 4, 1.0f), slice(total / 4 / world);
    for (int it = 0; it < 2; ++it) {
      (void)pg.barrier();
      auto t0 = absl::Now();
      auto st = pg.all_gather(shard.data(), full.data(), shard.size());
      auto t1 = absl::Now();
      auto st2 = pg.reduce_scatter(f.data(), slice.data(), f.size() / world, ReduceOp::kSum);
      auto t2 = absl::Now();
      auto st3 = pg.all_reduce(f.data(), f.size(), ReduceOp::kSum);
      auto t3 = absl::Now();
      std::vector<float> small(64, 1.0f);
      for (int k = 0; k < 100; ++k) (void)pg.all_reduce(small.data(), 64, ReduceOp::kMax);
      auto t4 = absl::Now();
      if (rank == 0) out += absl::StrCat("W=", world, " all_gather 100MB ", absl::FormatDuration(t1 - t0), " ", st.ToString(),
                            " | reduce_scatter 100MB ", absl::FormatDuration(t2 - t1), " ", st2.ToString(),
                            " | all_reduce 100MB ", absl::FormatDuration(t3 - t2), " ", st3.ToString(),
                            " | small all_reduce x100 ", absl::FormatDuration(t4 - t3), "\n");
    }
    return test::RankReport{"", out};
  }, s.path().string());
  for (auto& o : out) { printf("%s %s", o.problems().c_str(), o.report.output.c_str()); }
  }
}
