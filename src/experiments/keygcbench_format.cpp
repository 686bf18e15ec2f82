// SPDX-License-Identifier: Apache-2.0
// keygcbench's summary line (keygcbench_format.hpp).
#include "quiesce/experiments/keygcbench_format.hpp"

#include <fmt/format.h>

namespace quiesce::experiments {

std::string keygcbench_line(std::string_view name, const summary& ns, int name_width) {
  constexpr double ms = 1e6;
  return fmt::format("{:<{}}min={:.3f} avg={:.3f} max={:.3f} var={:.3f}", fmt::format("{}:", name),
                     name_width, ns.min() / ms, ns.mean() / ms, ns.max() / ms,
                     ns.variance() / (ms * ms));
}

}  // namespace quiesce::experiments
