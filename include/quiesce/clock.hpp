// quiesce/clock.hpp - the clocks every timestamp in quiesce comes from.
//
// All latency figures are CLOCK_MONOTONIC nanoseconds: cheap (vDSO, no syscall), never
// steps backwards, and shared by every thread, so a timestamp taken on one thread can be
// subtracted from one taken on another. Thread CPU time is a real syscall (hundreds of ns);
// sample it from a monitor, not per item.
#pragma once

#include <cstdint>
#include <ctime>

namespace quiesce {

// Monotonic time in nanoseconds since an unspecified epoch (boot). Safe from any thread,
// async-signal-safe. Cost: one vDSO clock_gettime (~20-30 ns on x86-64 KVM guests).
inline std::uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// CPU time consumed by the calling thread, in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
// A syscall on most kernels: do not call per work item.
inline std::uint64_t thread_cpu_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// CPU time consumed so far by the thread with the given clock id (see pthread_getcpuclockid),
// for monitors that watch other threads. Returns 0 if the clock cannot be read (thread gone).
std::uint64_t thread_cpu_ns(clockid_t thread_clock) noexcept;

// What one call of a clock costs on this machine, measured now: the median over several
// batches of back-to-back reads, in nanoseconds (fractional). Takes ~1 ms for now_ns and
// ~10 ms for thread_cpu_ns. Use it to state the resolution of a measurement, or to subtract
// the clock's own cost from very short intervals.
struct clock_cost {
  double monotonic_ns;   // one now_ns()
  double thread_cpu_ns;  // one thread_cpu_ns()
};
clock_cost measure_clock_cost();

}  // namespace quiesce
