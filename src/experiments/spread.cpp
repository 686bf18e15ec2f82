// Per-run figures (spread.hpp).
#include "quiesce/experiments/spread.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace quiesce::experiments {

double run_spread::median() const {
  if (runs.empty()) return 0;
  std::vector<double> v = runs;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double run_spread::min() const {
  return runs.empty() ? 0 : *std::min_element(runs.begin(), runs.end());
}

double run_spread::max() const {
  return runs.empty() ? 0 : *std::max_element(runs.begin(), runs.end());
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
