// SPDX-License-Identifier: Apache-2.0
#include "quiesce/summary.hpp"

#include <gtest/gtest.h>

#include "../../../src/base/random.hpp"

#include <random>
#include <vector>

namespace quiesce {
namespace {

// Two-pass population variance: the textbook definition Welford must agree with.
double two_pass_variance(const std::vector<double>& xs) {
  double mean = 0;
  for (double x : xs)
    mean += x;
  mean /= static_cast<double>(xs.size());
  double ss = 0;
  for (double x : xs)
    ss += (x - mean) * (x - mean);
  return ss / static_cast<double>(xs.size());
}

TEST(Summary, VarianceMatchesTwoPassComputation) {
  std::mt19937_64 rng(11);
  // Large offset + small spread: where the naive sum-of-squares formula loses precision.
  std::normal_distribution<double> dist(1e9, 1234.5);
  std::vector<double> xs(100000);
  summary s;
  for (double& x : xs) {
    x = dist(rng);
    s.add(x);
  }
  const double expected = two_pass_variance(xs);
  EXPECT_NEAR(s.variance(), expected, expected * 1e-9);
  EXPECT_EQ(s.count(), xs.size());
}

TEST(Summary, MergeEqualsPoolingTheSamples) {
  std::mt19937_64 rng(5);
  std::exponential_distribution<double> a_dist(1.0 / 4000.0), b_dist(1.0 / 0.2);
  std::vector<double> all;
  summary a, b;
  for (int i = 0; i < 3000; ++i) {
    const double x = a_dist(rng);
    a.add(x);
    all.push_back(x);
  }
  for (int i = 0; i < 50000; ++i) {
    const double x = b_dist(rng);
    b.add(x);
    all.push_back(x);
  }
  summary combined = a;
  combined.merge(b);
  const double expected = two_pass_variance(all);
  EXPECT_NEAR(combined.variance(), expected, expected * 1e-9);
  EXPECT_EQ(combined.count(), all.size());
  EXPECT_DOUBLE_EQ(combined.min(), std::min(a.min(), b.min()));
  EXPECT_DOUBLE_EQ(combined.max(), std::max(a.max(), b.max()));
  summary empty;
  empty.merge(combined);
  EXPECT_DOUBLE_EQ(empty.variance(), combined.variance());
  combined.merge(summary{});
  EXPECT_EQ(combined.count(), all.size());
}

TEST(Summary, PopulationNotSampleVariance) {
  summary s;
  s.add(1);
  s.add(3);
  EXPECT_DOUBLE_EQ(s.variance(), 1.0);  // sample variance would be 2
  EXPECT_DOUBLE_EQ(s.mean(), 2.0);
  EXPECT_DOUBLE_EQ(s.sum(), 4.0);
}

TEST(Summary, EmptyAndSingle) {
  summary s;
  EXPECT_EQ(s.count(), 0u);
  EXPECT_EQ(s.min(), 0.0);
  EXPECT_EQ(s.max(), 0.0);
  EXPECT_EQ(s.variance(), 0.0);
  s.add(-5);
  EXPECT_EQ(s.min(), -5.0);
  EXPECT_EQ(s.max(), -5.0);
  EXPECT_EQ(s.variance(), 0.0);
}

}  // namespace
}  // namespace quiesce

// The workloads' pseudo-random numbers (src/base/random.hpp).
TEST(Xorshift64, IsMarsaglias) {
  std::uint64_t state = 88172645463325252ull;  // Marsaglia's example seed and first output
  EXPECT_EQ(quiesce::xorshift64(state), 8748534153485358512ull);
  EXPECT_EQ(state, 8748534153485358512ull);
}
