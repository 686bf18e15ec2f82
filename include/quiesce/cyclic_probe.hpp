// SPDX-License-Identifier: Apache-2.0
// quiesce/cyclic_probe.hpp - a cyclictest-style wake-up latency probe: one thread per CPU,
// pinned to it, sleeping until absolute deadlines one period apart
// (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)) and recording how late each wake-up
// was. Whatever holds a CPU without letting the scheduler in (a kernel loop on a
// non-preemptible kernel, a SCHED_FIFO hog) shows up as lateness on that CPU's probe.
//
// A deadline missed by more than a period is not replayed: the probe records the one late
// wake-up and skips to the first deadline still ahead (counted in `overruns`), so a long
// stall is one large sample, not a train of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "quiesce/cpu_set.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/summary.hpp"

namespace quiesce {

struct cyclic_probe_options {
  std::chrono::nanoseconds period = std::chrono::milliseconds(1);
  cpu_set cpus;  // empty: every CPU the process may use
  // SCHED_FIFO priority of the probe threads (1..99), as cyclictest runs them: a wake-up
  // then preempts any SCHED_OTHER thread at once, so what remains is what the scheduler
  // could not preempt (kernel code on a non-preemptible kernel, interrupts, higher RT
  // threads). 0: SCHED_OTHER, where lateness also holds the fair scheduler's slices.
  // Without permission (no CAP_SYS_NICE, RLIMIT_RTPRIO 0) the probe runs SCHED_OTHER and
  // realtime() says so.
  int fifo_priority = 0;
};

// What one CPU's probe saw during a window.
struct cpu_lateness {
  int cpu = -1;
  summary late_ns;             // one sample per wake-up: actual - deadline, ns
  histogram late_hist_ns;      // the same samples, for percentiles
  std::uint64_t overruns = 0;  // deadlines skipped because a wake-up came a period late
  // Adds another window's (or CPU's) samples to these; `cpu` is kept.
  void merge(const cpu_lateness& other) noexcept;
};

class cyclic_probe {
 public:
  // Starts the threads (named "cyclic/<cpu>"). Throws std::invalid_argument for a period
  // that is not positive or CPUs the process may not use; std::system_error if a thread
  // cannot be pinned. Nothing is recorded until begin_window().
  explicit cyclic_probe(cyclic_probe_options options = {});
  // Stops and joins the threads.
  ~cyclic_probe();
  cyclic_probe(const cyclic_probe&) = delete;
  cyclic_probe& operator=(const cyclic_probe&) = delete;

  // Discards what was recorded and starts recording.
  void begin_window();
  // Stops recording; what each CPU's probe saw since begin_window(), in CPU order.
  std::vector<cpu_lateness> end_window();
  // Wake-ups recorded so far in the current window, over all CPUs / on one CPU (0 for a
  // CPU the probe does not cover). For waiting in tests.
  std::uint64_t samples() const;
  std::uint64_t samples(int cpu) const;

  const cpu_set& cpus() const noexcept;
  // True if every probe thread runs SCHED_FIFO at options.fifo_priority.
  bool realtime() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The samples of `cpu` and of every other CPU, merged (for "the collector's CPU and the
// others"). A CPU absent from `window` contributes nothing.
struct lateness_split {
  cpu_lateness on;      // the CPU asked for (cpu = that CPU)
  cpu_lateness others;  // every other CPU merged (cpu = -1)
};
lateness_split split_lateness(const std::vector<cpu_lateness>& window, int cpu);

}  // namespace quiesce
