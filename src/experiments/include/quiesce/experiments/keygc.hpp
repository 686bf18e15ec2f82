// SPDX-License-Identifier: Apache-2.0
// keygcbench for quiesce: the experiment behind `quiesce keygc`, `quiesce sweep keygc` and
// the report's seed-000 section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "quiesce/cyclic_probe.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/keys.hpp"
#include "quiesce/summary.hpp"

namespace quiesce::experiments {

// The largest population the CLI accepts, and a generous estimate of one key's memory (the
// key, its tree node, description, payload and link), to refuse a population beyond the
// machine's memory before building it.
inline constexpr std::size_t max_keys = 100'000'000;
inline constexpr std::uint64_t bytes_per_key = 512;

struct keygc_config {
  std::size_t keys = 100'000;
  std::size_t per_keyring = 100;
  keys::gc_mode mode = keys::gc_mode::chunked;
  std::size_t chunk = 64;
  double slice_us = 100;
  int runs = 1;
  int cpu = -1;             // the collector's CPU (-1: the last usable CPU)
  double timeout_ms = 500;  // expired phase: every key's timeout (gc_delay is 0)
  int probe_priority = 1;   // the cyclictest-style probe: SCHED_FIFO priority, 0 = SCHED_OTHER
};

// What one phase did to the machine, as the cyclictest-style probe (a pinned thread per
// CPU waking on absolute 1 ms deadlines) saw it, and how long reclaiming took. The same
// ruler for quiesce's collectors and the kernel's.
struct phase_latency {
  lateness_split probe;  // wake-up lateness, ns: the collector's CPU vs the other CPUs
  summary reclaim_ns;    // per run: from the keys becoming garbage to every one destroyed
  void merge(const phase_latency& other);
  nlohmann::json to_json() const;
};

struct keygc_result {
  keygc_config config;
  summary unused, expired;  // execution durations, ns
  summary combined() const;
  double total_ms() const { return combined().sum() / 1e6; }
  phase_latency unused_latency, expired_latency;
  std::string probe_policy;       // how the cyclictest-style probe ran ("SCHED_FIFO 1", ...)
  histogram probe_ns;             // probe work item: queue -> start on the collector's CPU pool
  std::uint64_t hog_reports = 0;  // "hogged CPU" lines the watchdog printed
  std::uint64_t executions = 0;
  // Every measured execution's duration, ns, per phase, in the order they ran (all runs):
  // the samples behind `unused` and `expired`, for the distribution plot.
  std::vector<double> unused_exec_ns, expired_exec_ns;
  // The work-item probe over the measured phases: (ms since the first run started,
  // queue -> start in us), one point per probe item that ran.
  std::vector<std::pair<double, double>> probe_series;
  nlohmann::json to_json() const;
  // Pools another run of the same configuration into this one (config.runs adds up; the
  // other run's probe series continues after this one's last point).
  void merge(const keygc_result& other);
};

// Runs the experiment `config.runs` times and pools the samples.
keygc_result run_keygc(const keygc_config& config);

// keygcbench's three lines for a result.
std::string keygc_lines(const keygc_result& r);
// The probe's keygcbench lines (ms) and the reclaim times of both phases.
std::string phase_latency_lines(const phase_latency& unused, const phase_latency& expired,
                                const std::string& probe_policy);
// The cyclictest-style probe over every CPU, at `priority` (see cyclic_probe_options), and
// the words for how it runs: "SCHED_FIFO 1", or "SCHED_OTHER" (asked, or not permitted).
cyclic_probe make_keygc_probe(int priority);
std::string probe_policy(const cyclic_probe& probe, int priority);
// The JSON of a summary of nanosecond samples, in ms as keygcbench prints them.
nlohmann::json summary_json(const summary& ns);

// The comparison of two results (the seed's summary lines and numbers).
struct keygc_comparison {
  double variance_drop_pct, total_time_increase_pct, probe_max_drop_pct;
};
keygc_comparison compare(const keygc_result& baseline, const keygc_result& patched);

}  // namespace quiesce::experiments
