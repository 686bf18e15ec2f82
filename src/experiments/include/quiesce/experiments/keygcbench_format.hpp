// SPDX-License-Identifier: Apache-2.0
// The figures the experiments print as the seed patches did: keygcbench's summary line and
// a before/after drop in percent. Experiment helpers, not library API.
#pragma once

#include <string>
#include <string_view>

#include "quiesce/summary.hpp"

namespace quiesce::experiments {

// keygcbench's line for a summary of nanosecond samples, printed in milliseconds (var in
// ms^2): "unused:   min=798.785 avg=4181.989 max=7565.193 var=11446068.927". The
// "name:" column is padded to `name_width` characters (10 fits "combined:").
std::string keygcbench_line(std::string_view name, const summary& ns, int name_width = 10);

// How far `after` fell below `before`, in percent of `before` (negative: it rose); 0 when
// `before` is 0. The experiments' before/after figures ("variance -93%").
constexpr double drop_pct(double before, double after) noexcept {
  return before == 0 ? 0.0 : (before - after) / before * 100.0;
}

}  // namespace quiesce::experiments
