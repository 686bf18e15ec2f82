// SPDX-License-Identifier: Apache-2.0
// Seed 000's before/after: quiesce's baseline collector (monolithic) against the patched
// one (chunked), optionally with a third quiesce collector (budget) and beside the host
// kernel's collector, as one typed result; the
// CLI's text, the report's Markdown, the JSON scripts read and the plots are renderings
// of it.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/spread.hpp"
#include "quiesce/experiments/verdict.hpp"

namespace quiesce::experiments {

struct keygc_comparison_result {
  keygc_result baseline, patched;             // every run pooled
  std::optional<keygc_result> also;           // a third collector, if asked (pooled)
  std::vector<keygc_comparison> per_run;      // each pair of runs, in order
  std::optional<kernel_keygc_result> kernel;  // the host kernel's collector, if measured
  std::string kernel_unusable;                // why it was not (empty: not asked, or measured)
  // Per pair of runs: each side's combined execution-time variance (ms^2) and total task
  // time (ms), the figures keygcbench prints.
  run_spread baseline_variance_ms2, patched_variance_ms2, baseline_total_ms, patched_total_ms;

  keygc_comparison figures() const { return compare(baseline, patched); }  // pooled
  // Each figure over the pairs of runs.
  run_spread variance_drop() const;
  run_spread total_time_increase() const;
  run_spread probe_max_drop() const;
  // {"baseline", "patched", "variance_drop_pct", "total_time_increase_pct",
  //  "probe_max_drop_pct"} (pooled), their "..._spread" over the pairs of runs, "per_run",
  // and "also", "kernel" or "kernel_unusable" when asked.
  nlohmann::json to_json() const;
  std::string text() const;      // keygcbench's blocks and the seed's summary lines
  std::string markdown() const;  // the report's section body
  // The execution-time distribution (log x) and the work-item probe's lateness over the
  // run, every collector.
  std::vector<plot_spec> plots() const;
  // The seed's figures before -> after, per pair of runs (verdict.hpp).
  std::vector<bought_row> bought() const;
};

// Runs `pairs` pairs of (baseline, patched), the order alternating, each run measured
// alone with its own population; the sides pool every run. With `also`, each pair is a
// triple: the third collector runs between the two (the figures stay the pair's). `step`
// is told each run before it starts.
keygc_comparison_result run_keygc_comparison(
    const keygc_config& baseline, const keygc_config& patched, int pairs,
    const std::function<void(const std::string&)>& step = {},
    const std::optional<keygc_config>& also = std::nullopt);

// The plots of one or more collectors' results, one series each.
std::vector<plot_spec> keygc_plots(const std::vector<const keygc_result*>& results);

// One collector's keygcbench block (mode, population, lines, probe, reclaim times).
std::string keygc_text(const keygc_result& r);

// The host kernel's collector for the report, same population: the unused phase, and the
// expired one with a gc_delay override (seconds; root) - else the result says why it was
// skipped - or why the kernel keyring cannot be used here.
void add_kernel_column(keygc_comparison_result& r, const keygc_config& c,
                       std::optional<unsigned> set_gc_delay = std::nullopt);

}  // namespace quiesce::experiments
