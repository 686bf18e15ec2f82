// SPDX-License-Identifier: Apache-2.0
// quiesce/histogram.hpp - a log-linear latency histogram (HDR-style).
//
// Values are unsigned integers, normally nanoseconds. Values below 64 have exact buckets;
// above, every power of two is split into 64 equal buckets, so a bucket is at most 1/64 of
// its lower bound wide and the reported representative (the bucket's midpoint) is within
// 1/128 (0.8%) of any value in it. The range covers 0 .. 2^42-1 (1 ns .. 73 minutes);
// larger values are counted in the last bucket (and in overflow()), while min/max/mean
// stay exact.
//
// record() is O(1), allocation-free and branch-light (inline below). A histogram is not
// thread-safe: keep one per writer thread and merge() them for reporting.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

namespace quiesce {

class histogram {
 public:
  static constexpr int sub_bucket_bits = 6;
  static constexpr std::uint64_t sub_buckets = std::uint64_t{1} << sub_bucket_bits;  // 64
  static constexpr int max_value_bits = 42;  // values < 2^42 ns (~73 min) are tracked
  static constexpr std::uint64_t max_trackable = (std::uint64_t{1} << max_value_bits) - 1;
  static constexpr std::size_t bucket_count =
      sub_buckets + (max_value_bits - sub_bucket_bits) * sub_buckets;  // 2368

  histogram();  // allocates the buckets (~19 KB), zeroed
  histogram(const histogram& other);
  histogram& operator=(const histogram& other);
  histogram(histogram&&) noexcept = default;
  histogram& operator=(histogram&&) noexcept = default;
  ~histogram() = default;

  // Adds one sample. O(1), no allocation.
  void record(std::uint64_t value) noexcept { record_n(value, 1); }
  // Adds `n` samples of the same value.
  void record_n(std::uint64_t value, std::uint64_t n) noexcept {
    if (n == 0) return;
    buckets_[bucket_of(value)] += n;
    if (value > max_trackable) overflow_ += n;
    count_ += n;
    sum_ += static_cast<sum_type>(value) * n;  // one 64x64->128 multiply, exact
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }

  // Adds every sample of `other` to this histogram.
  void merge(const histogram& other) noexcept;
  void reset() noexcept;

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t overflow() const noexcept { return overflow_; }
  // Exact smallest / largest sample; 0 when empty.
  std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max() const noexcept { return max_; }
  // Exact arithmetic mean; 0 when empty.
  double mean() const noexcept {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
  }

  // The nearest-rank percentile (p in [0, 100]): the value of the sample of rank
  // ceil(p/100 * count) (at least 1), reported as its bucket's midpoint clamped to
  // [min, max], so within 0.8% of the exact sample (a rank in the overflow bucket reports
  // the exact max). 0 when empty. Throws
  // std::invalid_argument if p is outside [0, 100] or NaN.
  std::uint64_t percentile(double p) const;

  // Bucket arithmetic, exposed for tests and exporters.
  static std::size_t bucket_of(std::uint64_t value) noexcept {
    if (value < sub_buckets) return static_cast<std::size_t>(value);
    if (value > max_trackable) return bucket_count - 1;
    const int exponent = std::bit_width(value) - 1;  // >= sub_bucket_bits
    const int shift = exponent - sub_bucket_bits;
    return static_cast<std::size_t>(sub_buckets * static_cast<std::uint64_t>(shift + 1) +
                                    ((value >> shift) - sub_buckets));
  }
  static std::uint64_t bucket_low(std::size_t index) noexcept;
  static std::uint64_t bucket_width(std::size_t index) noexcept;
  // Number of samples in bucket `index`.
  std::uint64_t bucket(std::size_t index) const noexcept { return buckets_[index]; }

 private:
  std::unique_ptr<std::uint64_t[]> buckets_;
  std::uint64_t count_ = 0;
  std::uint64_t overflow_ = 0;
  std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_ = 0;
  // The exact sum of the samples, in integer arithmetic (2^64 samples of the largest value
  // still fit): recording is on every work item's path, where the x87 arithmetic a long
  // double needs cost more than the rest of record_n().
  __extension__ typedef unsigned __int128 sum_type;
  sum_type sum_ = 0;
};

}  // namespace quiesce
