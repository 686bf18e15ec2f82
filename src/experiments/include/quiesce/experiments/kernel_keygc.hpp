// SPDX-License-Identifier: Apache-2.0
// Seed 000 on the host kernel: the kernel's own key_garbage_collector (this kernel has no
// chunking patch) reclaiming a population of user keys, measured with the same ruler as
// quiesce's collectors (keygc_experiment.hpp): the cyclictest-style probe per CPU and the
// reclaim time, per phase.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/keygcbench_format.hpp"

namespace quiesce::experiments {

struct kernel_keygc_config {
  std::size_t keys = 100'000;
  std::size_t per_keyring = 100;
  int runs = 1;
  int cpu = -1;  // where the phases are triggered (-1: the last usable CPU)
  // The expired phase runs only with a gc_delay override: the kernel reclaims expired keys
  // gc_delay seconds after they expire (300 s by default).
  std::optional<unsigned> set_gc_delay;
  // Expired phase: every key expires in the same wall-clock second, this many seconds after
  // the phase begins; 0 picks 2 + keys / 50,000, long enough that every timeout is set
  // before then (set_timeout slows ~50x while the collector works on expired keys of the
  // same keyrings, measured on 6.18).
  unsigned timeout_s = 0;
  int probe_priority = 1;  // the cyclictest-style probe: SCHED_FIFO priority, 0 = SCHED_OTHER
  // Record every execution of key_garbage_collector from the kernel's workqueue tracepoints
  // (quiesce/host/kernel_trace.hpp; root, tracefs). Where tracing cannot be used, the
  // result says why and the collector's CPU is inferred from kworker run time.
  bool trace = true;
  // Also run Debian's cyclictest pinned to the CPU the phases are triggered on (the
  // collector's), same priority and 1 ms interval as the probe, for each phase.
  bool cyclictest = false;
};

struct kernel_phase {
  std::string skipped;  // why the phase did not run (empty: it ran)
  // The CPU that ran key_garbage_collector (the phase is triggered on config.cpu; the
  // kernel queues the collector where key_put() or its timer ran): from the traced
  // executions (the CPU with the most collector time), else the CPU whose kworkers gained
  // the most run time during the phase. -1 until measured.
  int collector_cpu = -1;
  bool cpu_from_trace = false;
  summary kworker_ns;  // per run: what that CPU's kworkers ran during the phase
  // Traced: every execution of the collector in the phase (ns), keygcbench's samples.
  summary exec_ns;
  std::vector<double> exec_ns_list;
  // With cyclictest: its max latency per run (ns) on `cyclictest_cpu`.
  summary cyclictest_max_ns;
  int cyclictest_cpu = -1;
  phase_latency latency;
  nlohmann::json to_json() const;
};

struct kernel_keygc_result {
  kernel_keygc_config config;
  std::string kernel;  // uname -r
  std::string probe_policy;
  kernel_phase unused, expired;
  std::string untraced;           // why the tracepoints could not be used (empty: they were)
  std::uint64_t lost_events = 0;  // events the kernel dropped (executions may be missing)
  bool traced() const { return untraced.empty(); }
  summary combined() const;  // both phases' executions
  nlohmann::json to_json() const;
};

// keygcbench's lines for the kernel's traced executions (unused, expired, combined, total
// task time); empty if untraced.
std::string kernel_keygcbench_lines(const kernel_keygc_result& r);

// Runs the phases config.runs times on the kernel's keyring. Throws std::runtime_error
// saying why the kernel keyring cannot be used (no support, quota - checked before anything
// is created -, permissions, gc_delay not writable). Everything created is removed on every
// way out; gc_delay is restored on every way out, signals included.
kernel_keygc_result run_kernel_keygc(const kernel_keygc_config& config);

// The kernel's result in keygcbench's words.
std::string kernel_keygc_text(const kernel_keygc_result& r);

// Why the kernel keyring cannot be used for `keys` keys now (no support, quota, seccomp),
// nullopt if it can. Creates nothing if the quota does not fit.
std::optional<std::string> kernel_keyring_unusable(std::size_t keys, std::size_t per_keyring);

}  // namespace quiesce::experiments
