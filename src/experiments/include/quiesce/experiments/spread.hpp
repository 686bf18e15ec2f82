// SPDX-License-Identifier: Apache-2.0
// A figure measured once per run: its median and range over the runs, which every "Ours:"
// sentence quotes instead of one run's value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace quiesce::experiments {

// The median (the mean of the middle two for an even count), least and greatest of `v`;
// 0 when it is empty.
double median_of(std::vector<double> v);
double min_of(const std::vector<double>& v);
double max_of(const std::vector<double>& v);

struct run_spread {
  std::vector<double> runs;
  double median() const;  // 0 when there is no run
  double min() const;
  double max() const;
  nlohmann::json to_json() const;  // {"median", "min", "max", "runs"}
  // "median M (per run A .. B)" with `format` for each number, e.g. "{:+.1f}%".
  std::string text(const char* format) const;
};

}  // namespace quiesce::experiments
