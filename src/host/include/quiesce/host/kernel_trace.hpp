// SPDX-License-Identifier: Apache-2.0
// One kernel workqueue function's executions, from the kernel's own tracepoints
// (workqueue:workqueue_execute_start/end), read through libtracefs: how long each run of,
// say, key_garbage_collector took and on which CPU - keygcbench's metric for the host
// kernel's collector.
//
// A trace uses a private ftrace instance of its own (never the global buffer other tools
// may be using), CLOCK_MONOTONIC timestamps (the "mono" trace clock, comparable with
// quiesce::now_ns()), and both events filtered on the function. tracefs is mounted if it
// is not (and unmounted again); the instance is removed - on every way out, SIGINT and
// SIGTERM included (exit_cleanup.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/host/exit_cleanup.hpp"

namespace quiesce::host {

// One workqueue_execute_start or _end event.
struct workqueue_event {
  bool start = true;
  int cpu = -1;
  std::uint64_t ts_ns = 0;  // the trace clock (CLOCK_MONOTONIC for a workqueue_trace)
  std::uint64_t work = 0;   // the work_struct's address
};

// One execution: a start and the end that follows it for the same work item on the same
// CPU (a work item runs on one worker at a time, and a worker does not migrate mid-item
// on a per-CPU pool).
struct traced_execution {
  int cpu = -1;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint64_t duration_ns() const { return end_ns - start_ns; }
};

// Pairs events (in any order) into executions, in start order. A start without an end
// (still running when read) is left out and, with `open`, returned there; an end without
// a start (started before tracing) and a start followed by another start of the same work
// on the same CPU are dropped and counted in `unpaired`.
std::vector<traced_execution> pair_executions(std::vector<workqueue_event> events,
                                              std::size_t* unpaired = nullptr,
                                              std::vector<workqueue_event>* open = nullptr);

class workqueue_trace {
 public:
  // Starts tracing `function` (a kernel symbol, e.g. "key_garbage_collector"). Throws
  // std::runtime_error saying why the kernel's tracing cannot be used here (not root,
  // tracefs missing or locked down, the events or the function unknown); everything it
  // created is undone first.
  explicit workqueue_trace(const std::string& function);
  // Stops tracing, removes the instance, unmounts tracefs if this trace mounted it.
  ~workqueue_trace();
  workqueue_trace(const workqueue_trace&) = delete;
  workqueue_trace& operator=(const workqueue_trace&) = delete;

  // Every execution that ended since the last call (its events consumed from the
  // buffer). A start whose end is not recorded yet is kept for the next call.
  std::vector<traced_execution> take();
  // True if the last take() kept a start without its end: an execution is running.
  bool running() const noexcept { return !open_.empty(); }
  // Events the kernel dropped (buffer full) so far: executions may be missing if > 0.
  std::uint64_t lost_events() const noexcept { return lost_; }
  const std::string& instance_path() const noexcept { return instance_path_; }
  bool mounted_tracefs() const noexcept { return unmount_.has_value(); }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string instance_path_;
  std::uint64_t lost_ = 0;
  std::vector<workqueue_event> open_;            // starts without their end yet
  std::optional<exit_cleanup> unmount_;          // runs last (registered first)
  std::optional<exit_cleanup> remove_instance_;  // before the unmount
};

}  // namespace quiesce::host
