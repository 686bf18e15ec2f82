// SPDX-License-Identifier: Apache-2.0
// Seed 004 through the kernel (`quiesce verity bench --mount`): an "app cold start" on a
// quiesce verity mount. Each start drops the page cache (root), then several processes
// each open and read the app's files through the mount - half of them whole and in
// sequence (code), half in a few random reads (resources) - while the mount verifies on the
// patch's queue (per-CPU, highpri) or the one before it (unbound, highpri), and, as the
// baseline, the same files without sidecars through the same daemon (FUSE alone, nothing
// verified); the three rotate over runs, optionally beside CPU-bound load threads (a busy
// device). Per side: the verification workers' time runnable (schedstat run_delay: the
// seed's metric), the items' queue->start latency, the apps' read latency and the
// cold-start time (the slowest app's), each as median and spread over the runs.
//
// Then the sequential row: one file of seq_mib read whole with 1 MiB reads, cold (page
// cache dropped) and warm, directly from SOURCE, through the mount without a sidecar and
// through the mount verified (per-CPU queue) - what verification costs a reader beside
// FUSE itself. Typed result; text, Markdown, JSON and plots are renderings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/spread.hpp"
#include "quiesce/experiments/verdict.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/mount/verity_fs.hpp"

namespace quiesce::experiments {

struct verity_mount_bench_config {
  std::size_t app_mib = 64;  // the app's files, in total
  int apps = 4;              // processes per cold start
  int load = 0;              // CPU-bound background threads
  int runs = 3;              // runs of every side, the order rotating
  std::size_t seq_mib = 0;   // the sequential-read file (0: no sequential row)
  // The mounts' readahead window (verity_mount_options::read_ahead_kb; 0: the kernel's).
  unsigned read_ahead_kb = mount::verity_mount_options{}.read_ahead_kb;
};

// One queue: the runs' figures, and the latencies of every run pooled.
struct verity_mount_side {
  std::string queue;
  histogram sched_ns, read_ns;  // verification queue->start; each read(2) of each app
  run_spread run_delay_ms;      // the verification workers' time runnable, per run
  run_spread cold_start_ms;     // the slowest app's open-to-done, per run
  run_spread read_p99_us;       // per run
  // JSON also carries the pooled CDFs the plots draw (queue_to_start_cdf, read_latency_cdf:
  // [bucket's upper bound in us, fraction <= it]).
  nlohmann::json to_json() const;
};

// One way of reading the sequential file whole: per run, cold then warm, and the CPU time
// the cold read cost this process (every thread: the reader's syscalls, the mount's
// threads, the verification workers) - on N CPUs a read cannot take less than cpu / N.
struct seq_read_side {
  run_spread cold_ms, warm_ms, cold_cpu_ms;
  nlohmann::json to_json() const;
};

// The sequential row. The ratios are the medians', >= 1.0 when the verified read is as fast.
struct verity_mount_seq {
  std::size_t mib = 0;
  seq_read_side direct;           // from SOURCE
  seq_read_side fuse;             // through the mount, the same bytes without a sidecar
  seq_read_side verified;         // through the mount, verified on the per-CPU queue
  double cold_vs_fuse() const;    // fuse.cold / verified.cold (the goal: >= 0.9)
  double warm_vs_direct() const;  // direct.warm / verified.warm (the goal: >= 0.95)
  nlohmann::json to_json() const;
};

struct verity_mount_bench_result {
  verity_mount_bench_config config;
  verity_mount_side bound, unbound;
  verity_mount_side plain;              // no sidecars: FUSE alone (no queue, nothing verified)
  std::optional<verity_mount_seq> seq;  // with config.seq_mib > 0
  std::size_t files = 0;
  bool caches_dropped = false;  // false: not root, the page cache stayed warm
  nlohmann::json to_json() const;
  std::string markdown() const;  // the table and the "Ours:" sentence (also the CLI's text)
  // verity-mount-queue-to-start and verity-mount-read (CDFs, both queues, log x) and
  // verity-mount-per-run (each run's workers' time runnable and cold start).
  std::vector<plot_spec> plots() const;
  // The seed's figures before -> after, per run (verdict.hpp).
  std::vector<bought_row> bought() const;
};

// Why the bench cannot run here (no usable /dev/fuse), or nullopt.
std::optional<std::string> verity_mount_bench_unusable();

// Writes the app's files in a private temporary directory (removed on every way out),
// enables fs-verity on each (and keeps copies without sidecars), and measures. `step` is
// told each cold start and each sequential run before it starts:
// verity_mount_bench_steps(config) in all.
// Throws std::runtime_error if the mount cannot be set up.
std::size_t verity_mount_bench_steps(const verity_mount_bench_config& config);
// The bytes it writes in the temporary directory (files, copies and sidecars).
std::uint64_t verity_mount_bench_disk_bytes(const verity_mount_bench_config& config);
verity_mount_bench_result run_verity_mount_bench(
    const verity_mount_bench_config& config,
    const std::function<void(const std::string&)>& step = {});

}  // namespace quiesce::experiments
