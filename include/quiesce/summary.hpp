// SPDX-License-Identifier: Apache-2.0
// quiesce/summary.hpp - count, min, avg, max and population variance of a sample set.
//
// Welford's online algorithm (numerically stable in one pass), mergeable with Chan et al.'s
// pairwise update, so per-thread or per-phase summaries combine exactly like keygcbench's
// "combined" line pools its two phases. Not thread-safe: one writer, merge for reporting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// keygcbench's line for a summary of nanosecond samples, printed in milliseconds (var in
// ms^2): "unused:   min=798.785 avg=4181.989 max=7565.193 var=11446068.927". The
// "name:" column is padded to `name_width` characters (10 fits "combined:").
std::string keygcbench_line(std::string_view name, const summary& ns, int name_width = 10);

// How far `after` fell below `before`, in percent of `before` (negative: it rose); 0 when
// `before` is 0. The experiments' before/after figures ("variance -93%").
constexpr double drop_pct(double before, double after) noexcept {
  return before == 0 ? 0.0 : (before - after) / before * 100.0;
}

}  // namespace quiesce
