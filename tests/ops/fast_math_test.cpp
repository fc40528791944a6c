// The host kernels' vectorisable exp and tanh (ops/host/fast_math.h) against libm, over their
// whole range and at the edges (underflow, overflow, NaN, saturation); fast_exp_in_range is
// fast_exp on its range.
#include "ops/host/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ls::host_math {
namespace {

TEST(FastMath, ExpIsWithinTwoTenthsOfAMillionthRelative) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fast_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMath, ExpInRangeIsExpBitForBitOnItsRange) {
  int64_t differ = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0009765625f) {
    differ += fast_exp_in_range(x) == fast_exp(x) ? 0 : 1;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(fast_exp_in_range(-87.0f), fast_exp(-87.0f));
  EXPECT_EQ(fast_exp_in_range(88.0f), fast_exp(88.0f));
}

TEST(FastMath, TanhIsWithinThreeTenthsOfAMillionthAbsolute) {
  double worst = 0;
  for (float x = -12.0f; x <= 12.0f; x += 0.0009765625f) {
    worst = std::max(worst, std::abs(fast_tanh(x) - std::tanh(static_cast<double>(x))));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(fast_tanh(50.0f), 1.0f);
  EXPECT_EQ(fast_tanh(-50.0f), -1.0f);
  EXPECT_TRUE(std::isnan(fast_tanh(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace ls::host_math
