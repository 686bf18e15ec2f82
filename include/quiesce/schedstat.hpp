// SPDX-License-Identifier: Apache-2.0
// quiesce/schedstat.hpp - what the scheduler did to a thread: /proc/self/task/TID/schedstat.
//
// The three fields are the kernel's sched_info: time on a CPU, time runnable but waiting on
// a runqueue (run_delay - "scheduler latency" in seed 004), and the number of times the
// thread was switched in. Deltas between two samples of a worker thread are the user-space
// form of "time the workqueue spent runnable".
//
// Cost (bench_base --benchmark_filter=schedstat; a 2-vCPU AMD EPYC VM, medians): open+read+
// close ~6.6 us; pread on a kept-open file ~1.6 us - a kept-open reader is ~4x cheaper.
// Sample from a monitor thread, not per work item.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>

namespace quiesce {

struct sched_sample {
  std::uint64_t run_ns = 0;        // time spent running on a CPU
  std::uint64_t run_delay_ns = 0;  // time spent runnable, waiting for a CPU
  std::uint64_t switches = 0;      // times switched in (timeslices run)

  sched_sample& operator+=(const sched_sample& o) noexcept {
    run_ns += o.run_ns;
    run_delay_ns += o.run_delay_ns;
    switches += o.switches;
    return *this;
  }
  friend sched_sample operator-(const sched_sample& a, const sched_sample& b) noexcept {
    return {a.run_ns - b.run_ns, a.run_delay_ns - b.run_delay_ns, a.switches - b.switches};
  }
  friend bool operator==(const sched_sample&, const sched_sample&) = default;
};

// Parses the text of a schedstat file ("123 456 7\n"); nullopt if malformed.
std::optional<sched_sample> parse_schedstat(std::string_view text) noexcept;

// One thread's schedstat file, kept open so that each sample is a single pread.
// Not thread-safe (one reader at a time); movable.
class schedstat_reader {
 public:
  // The file of thread `tid` of this process; tid 0 means the calling thread.
  explicit schedstat_reader(pid_t tid = 0);
  // Any schedstat-format file (tests use fixture files).
  explicit schedstat_reader(const std::filesystem::path& file);
  schedstat_reader(schedstat_reader&& other) noexcept;
  schedstat_reader& operator=(schedstat_reader&& other) noexcept;
  schedstat_reader(const schedstat_reader&) = delete;
  schedstat_reader& operator=(const schedstat_reader&) = delete;
  ~schedstat_reader();

  // False when the file could not be opened: the kernel lacks CONFIG_SCHED_INFO, /proc is
  // not mounted, or the thread has exited. sample() then returns nullopt.
  bool available() const noexcept { return fd_ >= 0; }
  // The current values, or nullopt if unavailable or unreadable (thread exited).
  std::optional<sched_sample> sample() const noexcept;

 private:
  int fd_ = -1;
};

// One-shot read of thread `tid` (0 = calling thread): open, read, close.
std::optional<sched_sample> read_schedstat(pid_t tid = 0) noexcept;

}  // namespace quiesce
