// Sizing the CPU kernels' pool (set_num_threads), in a process of its own: the pool must not
// exist before the first test runs.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

namespace fp8::cpu {
namespace {

TEST(SetNumThreads, SizesThePoolBeforeItsFirstUseAndIsFixedAfter) {
  EXPECT_FALSE(set_num_threads(0));
  EXPECT_FALSE(set_num_threads(-2));
  ASSERT_TRUE(set_num_threads(3));
  EXPECT_EQ(configured_num_threads(), 3);
  EXPECT_EQ(num_threads(), 3);            // the pool is made now, with 3
  EXPECT_EQ(plan_chunks(1000, 1), 3);     // the chunking follows it
  EXPECT_FALSE(set_num_threads(5));       // too late: results depend on the count
  EXPECT_EQ(num_threads(), 3);
  EXPECT_EQ(configured_num_threads(), 3);
}

}  // namespace
}  // namespace fp8::cpu
