// SPDX-License-Identifier: Apache-2.0
#include "quiesce/histogram.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace quiesce {

histogram::histogram() : buckets_(std::make_unique<std::uint64_t[]>(bucket_count)) {}

histogram::histogram(const histogram& other)
    : buckets_(std::make_unique<std::uint64_t[]>(bucket_count)),
      count_(other.count_),
      overflow_(other.overflow_),
      min_(other.min_),
      max_(other.max_),
      sum_(other.sum_) {
  std::memcpy(buckets_.get(), other.buckets_.get(), bucket_count * sizeof(std::uint64_t));
}

histogram& histogram::operator=(const histogram& other) {
  if (this != &other) {
    histogram copy(other);
    *this = std::move(copy);
  }
  return *this;
}

void histogram::merge(const histogram& other) noexcept {
  for (std::size_t i = 0; i < bucket_count; ++i)
    buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  overflow_ += other.overflow_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void histogram::reset() noexcept {
  std::memset(buckets_.get(), 0, bucket_count * sizeof(std::uint64_t));
  count_ = overflow_ = max_ = 0;
  min_ = std::numeric_limits<std::uint64_t>::max();
  sum_ = 0;
}

std::uint64_t histogram::bucket_low(std::size_t index) noexcept {
  if (index < sub_buckets) return index;
  const std::size_t shift = index / sub_buckets - 1;
  return (sub_buckets + index % sub_buckets) << shift;
}

std::uint64_t histogram::bucket_width(std::size_t index) noexcept {
  if (index < sub_buckets) return 1;
  return std::uint64_t{1} << (index / sub_buckets - 1);
}

std::uint64_t histogram::percentile(double p) const {
  if (!(p >= 0.0 && p <= 100.0)) {
    throw std::invalid_argument("percentile: p must be in [0, 100], got " + std::to_string(p));
  }
  if (count_ == 0) return 0;
  auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      if (i == bucket_count - 1 && overflow_ > 0) return max_;  // beyond the tracked range
      const std::uint64_t mid = bucket_low(i) + (bucket_width(i) - 1) / 2;
      return std::clamp(mid, min(), max_);
    }
  }
  return max_;  // unreachable: the buckets hold count_ samples
}

}  // namespace quiesce
