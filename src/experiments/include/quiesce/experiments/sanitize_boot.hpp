// SPDX-License-Identifier: Apache-2.0
// Seed 003's experiment: the page sanitizer (quiesce/sanitize.hpp) on a thread registered
// with RCU Tasks, and meanwhile a boot whose trampoline attach (register_ftrace_direct ->
// synchronize_rcu_tasks) waits for a Tasks grace period - with cond_resched() (the bug)
// and cond_resched_tasks_qs() (the fix). Typed results; text, Markdown, JSON and plots
// are renderings.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "quiesce/experiments/keygcbench_format.hpp"
#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/spread.hpp"
#include "quiesce/experiments/verdict.hpp"
#include "quiesce/sanitize.hpp"

namespace quiesce::experiments {

struct boot_options {
  sanitize::sanitizer_options sanitizer;
  int steps_before = 3;  // boot steps before the trampoline attach
  int steps_after = 3;
  std::chrono::nanoseconds step_work = std::chrono::milliseconds(2);  // CPU work per step
  // Stall-detector thresholds for the run (the kernel's 10 s / 10 min / 120 s, scaled).
  std::chrono::nanoseconds info = std::chrono::milliseconds(250);
  std::chrono::nanoseconds stall = std::chrono::seconds(1);
  std::chrono::nanoseconds hung = std::chrono::seconds(2);
  // How often the sanitizer's progress is sampled for the plot.
  std::chrono::nanoseconds sample_every = std::chrono::milliseconds(2);
};

struct boot_result {
  sanitize::qs_policy policy = sanitize::qs_policy::tasks_qs;
  double waiter_ms = 0;  // the trampoline attach: rcu_synchronize(rcu_tasks_domain())
  double boot_ms = 0;    // first step to last
  double sanitize_ms = 0;
  std::size_t pages = 0;
  double pages_per_s = 0;
  std::uint64_t stall_reports = 0;   // watchdog reports about it: info, stall, hung waiter
  std::vector<std::string> reports;  // their lines, as printed (holdout lines included)
  // The time line, ms since the boot started: when the attach began waiting, the
  // sanitizer's progress (page operations done, % of the pages; the second pass over
  // left-dirty pages goes past 100), and when each report was first seen (within one
  // sampling period).
  double attach_at_ms = 0;
  std::vector<std::pair<double, double>> progress;
  std::vector<double> report_at_ms;
  nlohmann::json to_json() const;  // {"qs", "waiter_ms", "boot_ms", "sanitize_ms", "pages",
                                   //  "pages_per_s", "stall_reports"} and the time line
  std::string text() const;
};

// Runs the sanitizer on a thread named "ksgxd" (online in the Tasks domain) and, meanwhile,
// a boot on a thread named "systemd" whose attach step waits for a Tasks grace period.
// Sets the watchdog's RCU thresholds to the options' for the run (restored after).
boot_result run_boot(const boot_options& options);

// The bug against the fix, same pages and page cost, over one or more pairs of boots.
struct sanitize_comparison_result {
  // cond_resched(), cond_resched_tasks_qs(): one boot per pair of runs, in order.
  std::vector<boot_result> baseline_runs, patched_runs;
  const boot_result& baseline() const { return baseline_runs.front(); }  // the first pair
  const boot_result& patched() const { return patched_runs.front(); }
  // The first pair's figures, and each figure over the pairs.
  double waiter_drop_pct() const;
  double boot_drop_pct() const;
  double sanitize_slowdown_pct() const;
  run_spread waiter_drop() const;
  run_spread boot_drop() const;
  run_spread sanitize_slowdown() const;
  // {"baseline", "patched", "waiter_drop_pct", "boot_drop_pct", "sanitize_slowdown_pct"}
  // for the first pair, "..._spread" over the pairs, and "runs": [{"baseline", "patched"}].
  nlohmann::json to_json() const;
  std::string text() const;
  std::string markdown() const;
  // The sanitizer's progress over the boot, both policies, with each attach's wait and
  // the stall reports marked.
  std::vector<plot_spec> plots() const;
  // The seed's figures before -> after, per run (verdict.hpp).
  std::vector<bought_row> bought() const;
};

// Runs `pairs` pairs of boots (resched, then tasks_qs, the order alternating), the same
// options otherwise. `step` is told each boot before it starts.
sanitize_comparison_result run_sanitize_comparison(
    const boot_options& options, int pairs,
    const std::function<void(const std::string&)>& step = {});

// The plots of one or two boots.
std::vector<plot_spec> boot_plots(const std::vector<const boot_result*>& boots);

}  // namespace quiesce::experiments
