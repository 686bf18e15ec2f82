// SPDX-License-Identifier: Apache-2.0
// What a seed patch bought here, judged by one rule used everywhere (the report's first
// section, and each experiment's rows of it): a figure measured once per run before and
// after the fix, its median and range over the runs, beside the seed's published figure.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/spread.hpp"

namespace quiesce::experiments {

enum class better { higher, lower };

enum class verdict {
  reproduced,      // the seed's direction, and the before and after ranges do not overlap
  within_noise,    // the seed's direction, but the ranges overlap
  not_reproduced,  // no change, or the other way
};
// "reproduced", "same direction, within noise", "not reproduced".
const char* to_string(verdict v) noexcept;

// The rule. `seed_way` is the direction the seed's figure moved (lower: the fix made it
// smaller). Compares the medians for the direction and the ranges (min .. max over runs)
// for the overlap; an empty side is not reproduced.
verdict judge(const run_spread& before, const run_spread& after, better seed_way);

// One row of the report's "what each patch bought here".
struct bought_row {
  std::string seed;       // "000", "003", "004"
  std::string metric;     // what is compared, with its unit
  std::string published;  // the seed's figure for it
  better seed_way = better::lower;
  run_spread before, after;  // per run: the bug, the fix
  std::string note;          // what the columns measure when that differs, or empty
  // The better direction, when it is not the seed's: a price the seed paid (total time,
  // +2.2%) is better lower all the same. Unset: seed_way.
  std::optional<better> good_way = std::nullopt;

  verdict judged() const { return judge(before, after, seed_way); }
  // The change of the medians, in percent of before's (0 when before's is 0).
  double change_pct() const;
  // {"seed", "metric", "published", "seed_way", "before", "after", "change_pct", "verdict"}
  nlohmann::json to_json() const;
};

// The section body: one table row per figure, then the rule in a sentence.
std::string bought_markdown(const std::vector<bought_row>& rows);

// An experiment's "Ours:" sentence, by the same rule: each of `judged` (its bought() rows)
// with its medians, change and verdict; then every row of `judged` and `watched` (other
// figures the experiment reports, `seed_way` their better direction) whose median moved
// the wrong way, named as worse after the fix, with "beyond noise" when the ranges do not
// overlap - or "none got worse".
std::string ours_sentence(const std::vector<bought_row>& judged,
                          const std::vector<bought_row>& watched = {});

// A figure `ours_sentence` watches: not a seed's, `good` its better direction.
bought_row watched(std::string metric, better good, run_spread before, run_spread after);
// A figure measured once (every run pooled) as a spread of one value.
inline run_spread pooled(double value) {
  return run_spread{{value}};
}

// True if the median of `r` moved against its better direction (good_way, else seed_way).
bool got_worse(const bought_row& r);

}  // namespace quiesce::experiments
