// SPDX-License-Identifier: Apache-2.0
#include "quiesce/histogram.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace quiesce {
namespace {

constexpr std::uint64_t one_hour_ns = 3'600'000'000'000ull;

// The exact nearest-rank percentile of sorted samples: the rank-ceil(p/100*n) sample.
std::uint64_t exact_percentile(const std::vector<std::uint64_t>& sorted, double p) {
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

TEST(Histogram, BucketsTileTheRangeWithBoundedWidth) {
  // Every bucket starts where the previous one ends, and is at most 1/64 of its start wide.
  std::uint64_t expected_low = 0;
  for (std::size_t i = 0; i < histogram::bucket_count; ++i) {
    ASSERT_EQ(histogram::bucket_low(i), expected_low) << "bucket " << i;
    const std::uint64_t width = histogram::bucket_width(i);
    if (i >= histogram::sub_buckets) {
      ASSERT_LE(width * 64, histogram::bucket_low(i)) << "bucket " << i;
    } else {
      ASSERT_EQ(width, 1u);
    }
    ASSERT_EQ(histogram::bucket_of(histogram::bucket_low(i)), i);
    ASSERT_EQ(histogram::bucket_of(histogram::bucket_low(i) + width - 1), i);
    expected_low += width;
  }
  EXPECT_EQ(expected_low, histogram::max_trackable + 1);
  EXPECT_GT(histogram::max_trackable, one_hour_ns);
}

TEST(Histogram, PercentilesWithinOnePercentOfExactAcrossNanosecondsToAnHour) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_value(0.0, std::log(static_cast<double>(one_hour_ns)));
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<std::uint64_t> samples(20000 + trial * 7919);
    histogram h;
    for (auto& s : samples) {
      s = static_cast<std::uint64_t>(std::exp(log_value(rng)));
      h.record(s);
    }
    std::sort(samples.begin(), samples.end());
    for (double p : {0.0, 0.1, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
      const double exact = static_cast<double>(exact_percentile(samples, p));
      const double got = static_cast<double>(h.percentile(p));
      EXPECT_LE(std::abs(got - exact), 0.01 * exact) << "p" << p << " trial " << trial;
    }
    EXPECT_EQ(h.count(), samples.size());
    EXPECT_EQ(h.min(), samples.front());
    EXPECT_EQ(h.max(), samples.back());
  }
}

TEST(Histogram, ClusteredLatenciesKeepTheirTail) {
  // A realistic shape: most samples ~5 us, a few at 4 ms ticks.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> fast(5000.0, 500.0);
  std::vector<std::uint64_t> samples;
  histogram h;
  for (int i = 0; i < 100000; ++i) {
    const auto v =
        static_cast<std::uint64_t>(i % 500 == 0 ? 4'000'000 + i : std::max(1.0, fast(rng)));
    samples.push_back(v);
    h.record(v);
  }
  std::sort(samples.begin(), samples.end());
  for (double p : {50.0, 99.0, 99.5, 99.9, 100.0}) {
    const double exact = static_cast<double>(exact_percentile(samples, p));
    EXPECT_LE(std::abs(static_cast<double>(h.percentile(p)) - exact), 0.01 * exact) << p;
  }
}

TEST(Histogram, SmallValuesAreExact) {
  histogram h;
  for (std::uint64_t v = 0; v < 64; ++v)
    h.record(v);
  for (int p = 1; p <= 100; ++p) {
    const auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * 64));
    EXPECT_EQ(h.percentile(p), rank - 1);
  }
}

TEST(Histogram, MeanMinMaxAreExact) {
  histogram h;
  h.record(10);
  h.record(1'000'000);
  h.record_n(123'456'789, 2);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.min(), 10u);
  EXPECT_EQ(h.max(), 123'456'789u);
  EXPECT_DOUBLE_EQ(h.mean(), (10.0 + 1e6 + 2 * 123'456'789.0) / 4);
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::uint64_t> dist(0, 10'000'000'000ull);
  histogram a, b, all;
  for (int i = 0; i < 50000; ++i) {
    const std::uint64_t v = dist(rng);
    (i % 3 ? a : b).record(v);
    all.record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_DOUBLE_EQ(a.mean(), all.mean());
  for (std::size_t i = 0; i < histogram::bucket_count; ++i)
    ASSERT_EQ(a.bucket(i), all.bucket(i));
}

TEST(Histogram, OverflowIsCountedAndMaxStaysExact) {
  histogram h;
  const std::uint64_t huge = std::uint64_t{1} << 50;
  h.record(5);
  h.record(huge);
  EXPECT_EQ(h.overflow(), 1u);
  EXPECT_EQ(h.max(), huge);
  EXPECT_EQ(h.percentile(100), huge);  // clamped to the exact max
}

TEST(Histogram, EmptyAndInvalidPercentiles) {
  histogram h;
  EXPECT_EQ(h.percentile(50), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_THROW(h.percentile(-1), std::invalid_argument);
  EXPECT_THROW(h.percentile(100.5), std::invalid_argument);
  EXPECT_THROW(h.percentile(std::nan("")), std::invalid_argument);
}

TEST(Histogram, CopyResetAndMoveKeepIndependentState) {
  histogram a;
  a.record(100);
  histogram b = a;
  b.record(200);
  EXPECT_EQ(a.count(), 1u);
  EXPECT_EQ(b.count(), 2u);
  a = b;
  EXPECT_EQ(a.count(), 2u);
  b.reset();
  EXPECT_EQ(b.count(), 0u);
  EXPECT_EQ(b.percentile(50), 0u);
  EXPECT_EQ(a.percentile(100), 200u);
  histogram c = std::move(a);
  EXPECT_EQ(c.count(), 2u);
}

}  // namespace
}  // namespace quiesce
