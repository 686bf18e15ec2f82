// SPDX-License-Identifier: Apache-2.0
// Seed 004's experiment (`quiesce verity bench`): reader threads read a file through
// fs-verity's verified path while its verification runs on the patch's queue
// (fsverity_read_queue: per-CPU, highpri, max_active = CPUs) or the one before it
// (unbound | highpri), the order alternating over runs. The seed's metric is how long the
// verification workers spent runnable (schedstat run_delay); queue->start is the second
// figure. Typed result; text, Markdown, JSON and plots are renderings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/spread.hpp"
#include "quiesce/experiments/verdict.hpp"
#include "quiesce/histogram.hpp"

namespace quiesce::experiments {

struct verity_bench_config {
  std::size_t file_mib = 256;
  int readers = 2;     // even-numbered readers read at random offsets, odd ones in sequence
  double seconds = 3;  // per queue per run
  std::size_t read_kib = 64;
  int runs = 3;  // pairs of (per-CPU, unbound) measurements, interleaved
};

// One queue, one run or every run pooled.
struct verity_bench_side {
  std::string queue;
  histogram sched_ns, read_ns;  // verification queue->start; whole read
  std::uint64_t run_delay_ns = 0, bytes = 0;
  double seconds = 0;
  void add(const verity_bench_side& run);  // pools another run of the same queue
  // The queue->start CDF: (bucket's upper bound in us, fraction of items <= it), per
  // non-empty histogram bucket.
  std::vector<std::pair<double, double>> queue_to_start_cdf() const;
  nlohmann::json to_json() const;
};

struct verity_bench_result {
  verity_bench_config config;
  verity_bench_side bound, unbound;             // every run pooled
  run_spread bound_delay_ms, unbound_delay_ms;  // the workers' time runnable, per run
  run_spread delay_drop_pct, sched_drop_pct;    // unbound -> per-CPU, per run

  nlohmann::json to_json() const;  // the keys `verity bench --json` has always printed
  std::string markdown() const;    // the table and the "Ours:" sentence (also the CLI's text)
  // The queue->start CDF of both queues, and the workers' time runnable per run.
  std::vector<plot_spec> plots() const;
  // The seed's figures before -> after, per run (verdict.hpp).
  std::vector<bought_row> bought() const;
};

// The bytes the bench writes in the temporary directory: the data and its tree.
std::uint64_t verity_bench_disk_bytes(const verity_bench_config& config);

// Writes a file of random bytes in a private temporary directory (removed on every way
// out, signals included), enables fs-verity on it and measures. `step` is told each
// measurement before it starts.
verity_bench_result run_verity_bench(const verity_bench_config& config,
                                     const std::function<void(const std::string&)>& step = {});

}  // namespace quiesce::experiments
