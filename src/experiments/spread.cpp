// SPDX-License-Identifier: Apache-2.0
// Per-run figures (spread.hpp).
#include "quiesce/experiments/spread.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace quiesce::experiments {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double run_spread::median() const {
  return median_of(runs);
}

double run_spread::min() const {
  return min_of(runs);
}

double run_spread::max() const {
  return max_of(runs);
}

nlohmann::json run_spread::to_json() const {
  return {{"median", median()}, {"min", min()}, {"max", max()}, {"runs", runs}};
}

std::string run_spread::text(const char* format) const {
  const auto f = [&](double v) { return fmt::format(fmt::runtime(format), v); };
  if (runs.size() == 1) return f(runs[0]) + " (one run)";
  return fmt::format("{} (median of {} runs; per run {} .. {})", f(median()), runs.size(), f(min()),
                     f(max()));
}

}  // namespace quiesce::experiments
