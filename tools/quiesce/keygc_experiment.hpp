// keygcbench for quiesce: the experiment behind `quiesce keygc`, `quiesce sweep keygc` and
// the report's seed-000 section.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "quiesce/histogram.hpp"
#include "quiesce/keys.hpp"
#include "quiesce/summary.hpp"

namespace quiesce::cli {

struct keygc_config {
  std::size_t keys = 100'000;
  std::size_t per_keyring = 100;
  keys::gc_mode mode = keys::gc_mode::chunked;
  std::size_t chunk = 64;
  double slice_us = 100;
  int runs = 1;
  int cpu = -1;             // the collector's CPU (-1: the last usable CPU)
  double timeout_ms = 500;  // expired phase: every key's timeout (gc_delay is 0)
};

struct keygc_result {
  keygc_config config;
  summary unused, expired;  // execution durations, ns
  summary combined() const;
  double total_ms() const { return combined().sum() / 1e6; }
  histogram probe_ns;             // probe work item: queue -> start on the collector's CPU pool
  std::uint64_t hog_reports = 0;  // "hogged CPU" lines the watchdog printed
  std::uint64_t executions = 0;
  nlohmann::json to_json() const;
};

// Runs the experiment `config.runs` times and pools the samples.
keygc_result run_keygc(const keygc_config& config);

// keygcbench's three lines for a result.
std::string keygc_lines(const keygc_result& r);

// The comparison of two results (the seed's summary lines and numbers).
struct keygc_comparison {
  double variance_drop_pct, total_time_increase_pct, probe_max_drop_pct;
};
keygc_comparison compare(const keygc_result& baseline, const keygc_result& patched);

}  // namespace quiesce::cli
