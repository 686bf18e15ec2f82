// SPDX-License-Identifier: Apache-2.0
// quiesce/summary.hpp - count, min, avg, max and population variance of a sample set.
//
// Welford's online algorithm (numerically stable in one pass), mergeable with Chan et al.'s
// pairwise update, so per-thread or per-phase summaries combine exactly like keygcbench's
// "combined" line pools its two phases. Not thread-safe: one writer, merge for reporting.
#pragma once

#include <cstdint>

namespace quiesce {

class summary {
 public:
  void add(double x) noexcept;
  void merge(const summary& other) noexcept;

  std::uint64_t count() const noexcept { return count_; }
  // All 0 when empty.
  double min() const noexcept { return count_ ? min_ : 0.0; }
  double max() const noexcept { return count_ ? max_ : 0.0; }
  double mean() const noexcept { return mean_; }
  double sum() const noexcept { return mean_ * static_cast<double>(count_); }
  // Population variance: the sum of squared deviations divided by n (not n - 1), as
  // keygcbench prints it. 0 for fewer than two samples.
  double variance() const noexcept { return count_ ? m2_ / static_cast<double>(count_) : 0.0; }

 private:
  std::uint64_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0;  // sum of squared deviations from the running mean
  double min_ = 0;
  double max_ = 0;
};

}  // namespace quiesce
