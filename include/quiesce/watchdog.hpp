// SPDX-License-Identifier: Apache-2.0
// quiesce/watchdog.hpp - one thread per process that notices what the kernel's watchdogs
// notice: workqueue pools that make no progress (lockup), work items that hog a CPU,
// workers that went to sleep while their pool has work, and (with RCU) grace periods
// that are too old and synchronize callers that wait too long.
//
// Reports use the kernel's wording, go through the log sink (quiesce/log.hpp) and are
// counted, so programs and tests can assert on them. Thresholds default to the kernel's.
//
// The thread starts on first use (when a runtime module registers a check) and is never
// stopped or joined: runtime threads may report through it while static destructors run,
// and it ends with the process. It ticks every `tick` while any runtime module holds it
// busy (work in flight) and sleeps otherwise, so an idle program pays nothing. Checks log
// with no runtime lock held.
#pragma once

#include <chrono>
#include <cstdint>

namespace quiesce {

struct watchdog_config {
  // How often checks run while something is in flight (the kernel checks at each tick,
  // HZ=250 here). Checks with smaller thresholds run at least twice per threshold.
  std::chrono::nanoseconds tick = std::chrono::milliseconds(4);
  // wq_watchdog_thresh: a pool whose first pending item has not changed for this long is
  // reported as locked up. 0 disables lockup detection.
  std::chrono::nanoseconds wq_lockup = std::chrono::seconds(30);
  // wq_cpu_intensive_thresh_us: a work item that has used this much CPU time in one
  // execution on a per-CPU pool is marked CPU-intensive (it stops counting for concurrency,
  // so another worker may start) and reported. 0 disables hog handling.
  std::chrono::nanoseconds wq_cpu_intensive = std::chrono::milliseconds(10);
  // Report a hogging function at this many offences, then at every doubling.
  unsigned wq_cpu_intensive_warning = 4;
  // Start another worker when the running one is found asleep (state S or D in
  // /proc/self/task/TID/stat) in its item (the function, or the log sink reporting that it
  // threw) while its pool has pending work.
  bool wq_sleep_detection = true;

  // RCU stall detection (rcupdate.rcu_cpu_stall_timeout): a grace period of the default or
  // QSBR domain older than this reports "INFO: rcu detected stalls on threads:" with one
  // line per holdout. 0 disables.
  std::chrono::nanoseconds rcu_stall = std::chrono::seconds(21);
  // The same for the Tasks domain (rcupdate.rcu_task_stall_timeout, 10 minutes).
  std::chrono::nanoseconds rcu_tasks_stall = std::chrono::minutes(10);
  // rcu_task_stall_info: a Tasks grace period this old prints "rcu_tasks_wait_gp: rcu_tasks
  // grace period number N (since boot) is M ms old.", again after `mult` times the previous
  // interval (10, 40, 130 s ...). 0 disables.
  std::chrono::nanoseconds rcu_tasks_info = std::chrono::seconds(10);
  unsigned rcu_tasks_info_mult = 3;
  // hung_task_timeout_secs: a thread blocked in rcu_synchronize/rcu_barrier this long is
  // reported once: "INFO: task NAME:TID blocked for more than N seconds." 0 disables.
  std::chrono::nanoseconds hung_task = std::chrono::seconds(120);
};

// Replaces the configuration; takes effect at once (a tick runs with it now, and the next
// one a new `tick` later). Throws std::invalid_argument
// naming the field if a duration is negative or tick is zero.
void set_watchdog_config(const watchdog_config& config);
watchdog_config get_watchdog_config();

// What the watchdog has found since the process started.
struct watchdog_counters {
  std::uint64_t wq_lockups = 0;        // lockup reports printed
  std::uint64_t wq_cpu_hogs = 0;       // executions marked CPU-intensive
  std::uint64_t wq_hog_reports = 0;    // "hogged CPU" lines printed
  std::uint64_t wq_sleepers = 0;       // workers found asleep with work pending
  std::uint64_t rcu_stall_infos = 0;   // "grace period number N ... is M ms old" lines
  std::uint64_t rcu_stalls = 0;        // "detected stalls on threads" reports
  std::uint64_t rcu_hung_waiters = 0;  // "blocked for more than N seconds" reports
};
watchdog_counters get_watchdog_counters();

// Sets a configuration for a scope and restores the one before it on the way out (an
// exception or a test's early ASSERT included). Not for concurrent use: the configuration
// is process-wide, and scopes nest only in the order they were made.
class scoped_watchdog_config {
 public:
  explicit scoped_watchdog_config(const watchdog_config& config) : saved_(get_watchdog_config()) {
    set_watchdog_config(config);
  }
  ~scoped_watchdog_config() { set_watchdog_config(saved_); }
  scoped_watchdog_config(const scoped_watchdog_config&) = delete;
  scoped_watchdog_config& operator=(const scoped_watchdog_config&) = delete;

 private:
  watchdog_config saved_;
};

}  // namespace quiesce
