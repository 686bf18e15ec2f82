// Seed 000's before/after: quiesce's baseline collector (monolithic) against the patched
// one (chunked), optionally beside the host kernel's collector, as one typed result; the
// CLI's text, the report's Markdown, the JSON scripts read and the plots are renderings
// of it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/plot.hpp"

namespace quiesce::experiments {

struct keygc_comparison_result {
  keygc_result baseline, patched;
  std::optional<kernel_keygc_result> kernel;  // the host kernel's collector, if measured
  std::string kernel_unusable;                // why it was not (empty: not asked, or measured)

  keygc_comparison figures() const { return compare(baseline, patched); }
  // {"baseline", "patched", "variance_drop_pct", "total_time_increase_pct",
  //  "probe_max_drop_pct"} and "kernel" or "kernel_unusable" when asked.
  nlohmann::json to_json() const;
  std::string text() const;      // keygcbench's blocks and the seed's summary lines
  std::string markdown() const;  // the report's section body
  // The execution-time distribution (log x) and the work-item probe's lateness over the
  // run, both collectors.
  std::vector<plot_spec> plots() const;
};

// The plots of one or more collectors' results, one series each.
std::vector<plot_spec> keygc_plots(const std::vector<const keygc_result*>& results);

// One collector's keygcbench block (mode, population, lines, probe, reclaim times).
std::string keygc_text(const keygc_result& r);

// The host kernel's collector for the report: the unused phase only (the report does not
// change gc_delay), or why the kernel keyring cannot be used here.
void add_kernel_column(keygc_comparison_result& r, const keygc_config& c);

}  // namespace quiesce::experiments
