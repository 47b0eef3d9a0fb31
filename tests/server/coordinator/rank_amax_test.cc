#include "server/coordinator/rank_amax.h"

#include <gtest/gtest.h>

namespace fp8::server {
namespace {

TEST(RankAmax, AnOutlierShowsOnceEveryRankReportedTheStep) {
  RankAmax a;
  EXPECT_FALSE(a.report(10, 0, 3, 1.0f, 8).has_value());
  EXPECT_FALSE(a.report(10, 2, 3, 20.0f, 8).has_value()) << "rank 1 has not reported step 10 yet";
  const auto o = a.report(10, 1, 3, 2.0f, 8);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->rank, 2);
  EXPECT_FLOAT_EQ(o->amax, 20.0f);
  EXPECT_FLOAT_EQ(o->others, 2.0f);
  EXPECT_EQ(a.by_rank(), (std::vector<float>{1.0f, 2.0f, 20.0f}));
}

TEST(RankAmax, NoOutlierWithinTheFactorOrAgainstZerosOrWhenOff) {
  RankAmax a;
  a.report(1, 0, 2, 1.0f, 8);
  EXPECT_FALSE(a.report(1, 1, 2, 8.0f, 8).has_value()) << "8x is not above 8x";
  a.report(2, 0, 2, 0.0f, 8);
  EXPECT_FALSE(a.report(2, 1, 2, 5.0f, 8).has_value()) << "peers that saw only zeros";
  a.report(3, 0, 2, 1.0f, 1);
  EXPECT_FALSE(a.report(3, 1, 2, 100.0f, 1).has_value()) << "factor <= 1 turns it off";
  RankAmax alone;
  EXPECT_FALSE(alone.report(1, 0, 1, 100.0f, 8).has_value()) << "one rank has no peers";
}

TEST(RankAmax, ANewerStepClosesTheOldOneAndALateReportIsIgnored) {
  RankAmax a;
  a.report(5, 0, 2, 1.0f, 8);
  a.report(5, 1, 2, 3.0f, 8);
  a.report(10, 1, 2, 2.0f, 8);
  EXPECT_EQ(a.step(), 10);
  EXPECT_EQ(a.by_rank(), (std::vector<float>{-1.0f, 2.0f}));
  a.report(5, 0, 2, 99.0f, 8);  // late: ignored
  const std::vector<RankAmax::Point> h = a.history();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].step, 5);
  EXPECT_FLOAT_EQ(h[0].amax, 3.0f);
  EXPECT_EQ(h[0].rank, 1);
  EXPECT_EQ(h[1].step, 10);  // the open step
  // Bad reports change nothing.
  EXPECT_FALSE(a.report(10, 2, 2, 1.0f, 8).has_value());
  EXPECT_FALSE(a.report(10, 0, 2, -1.0f, 8).has_value());
  EXPECT_EQ(a.by_rank(), (std::vector<float>{-1.0f, 2.0f}));
}

TEST(RankAmax, TheHistoryStaysBoundedAndSpansTheWholeRun) {
  RankAmax a;
  const int64_t steps = 3 * static_cast<int64_t>(RankAmax::kMaxPoints);
  for (int64_t s = 1; s <= steps; ++s) a.report(s, 0, 1, static_cast<float>(s), 8);
  const std::vector<RankAmax::Point> h = a.history();
  EXPECT_LE(h.size(), RankAmax::kMaxPoints + 1);
  EXPECT_GE(h.size(), RankAmax::kMaxPoints / 2);
  EXPECT_EQ(h.front().step, 1) << "still starts at the beginning";
  EXPECT_EQ(h.back().step, steps);
  for (size_t i = 1; i < h.size(); ++i) EXPECT_LT(h[i - 1].step, h[i].step);
}

}  // namespace
}  // namespace fp8::server
