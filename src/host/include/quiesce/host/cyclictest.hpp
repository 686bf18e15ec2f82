// SPDX-License-Identifier: Apache-2.0
// Debian's cyclictest (rt-tests), the field's ruler for wake-up latency, run beside
// quiesce's cyclic_probe: one measuring thread pinned to a CPU, the same priority and
// 1 ms interval, for as long as a phase lasts.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace quiesce::host {

// Why cyclictest cannot run here (not installed), or nullopt.
std::optional<std::string> cyclictest_unavailable();

class cyclictest_run {
 public:
  // Starts `cyclictest -q -N -t1 -a CPU -p PRIORITY -i 1000` (SCHED_FIFO, or SCHED_OTHER for
  // priority 0: --policy), its
  // main thread on another CPU where there is one. Throws std::runtime_error if it cannot
  // start.
  cyclictest_run(int cpu, int priority);
  // Kills a run that was not stopped.
  ~cyclictest_run();
  cyclictest_run(const cyclictest_run&) = delete;
  cyclictest_run& operator=(const cyclictest_run&) = delete;

  // True once its measuring thread has woken several times (schedstat): it measures from
  // then until stopped.
  bool measuring() const;
  // Stops it (SIGINT, as a user's ^C) and returns the largest latency it saw, ns. Throws
  // std::runtime_error with what it printed if it failed or reported no latency.
  std::uint64_t stop();
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;  // read end of its stdout
};

// The largest "Max:" of cyclictest's summary lines ("T: 0 (123) P: 1 I:1000 C: 996 Min: 55
// Act: 59 Avg: 66 Max: 227"), in its units; nullopt if there is none.
std::optional<std::uint64_t> parse_cyclictest_max(const std::string& output);

}  // namespace quiesce::host
