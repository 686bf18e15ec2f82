// SPDX-License-Identifier: Apache-2.0
// quiesce/clock.hpp - the clocks every timestamp in quiesce comes from.
//
// All latency figures are CLOCK_MONOTONIC nanoseconds: cheap (vDSO, no syscall), never
// steps backwards, and shared by every thread, so a timestamp taken on one thread can be
// subtracted from one taken on another. Thread CPU time is a real syscall (hundreds of ns);
// sample it from a monitor, not per item. The runtime's hot paths time their intervals with
// stat_ns() instead: the same nanoseconds from the TSC, at a third of the cost.
#pragma once

#include <cstdint>
#include <ctime>

namespace quiesce {

// A timespec as nanoseconds (a time since the clock's epoch, or a duration).
constexpr std::uint64_t timespec_to_ns(const timespec& ts) noexcept {
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Monotonic time in nanoseconds since an unspecified epoch (boot). Safe from any thread,
// async-signal-safe. Cost: one vDSO clock_gettime (~20-30 ns on x86-64 KVM guests).
inline std::uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return timespec_to_ns(ts);
}

namespace detail {
// stat_ns()'s scale, set once before main (clock.cpp) and read-only after. tsc == false:
// stat_ns() is now_ns().
struct stat_clock_scale {
  bool tsc = false;
  std::uint64_t base_tick = 0;  // a TSC reading taken at base_ns
  std::uint64_t base_ns = 0;    // CLOCK_MONOTONIC at base_tick
  std::uint64_t mult = 0;       // nanoseconds per tick, times 2^32
};
extern stat_clock_scale g_stat_clock;
}  // namespace detail

// Nanoseconds for intervals measured on hot paths (workqueue queue-to-start and run
// times, grace-period durations, the watchdog's ages of what those paths stamp). Where
// the TSC is invariant and the kernel itself keeps time with it (clocksource "tsc", so it
// is synchronised across CPUs), one RDTSC scaled to ns by a factor calibrated at load
// against CLOCK_MONOTONIC over ~1 ms (error ~2e-5); otherwise now_ns(). It starts equal to
// now_ns() but drifts from it (by that error, and by NTP's slewing of CLOCK_MONOTONIC):
// subtract only stat_ns() from stat_ns(), never mix the two. Safe from any thread.
inline std::uint64_t stat_ns() noexcept {
#if defined(__x86_64__)
  const detail::stat_clock_scale& s = detail::g_stat_clock;
  if (s.tsc) {
    const std::uint64_t ticks = __builtin_ia32_rdtsc() - s.base_tick;
    return s.base_ns +
           static_cast<std::uint64_t>((static_cast<unsigned __int128>(ticks) * s.mult) >> 32);
  }
#endif
  return now_ns();
}
// Whether stat_ns() reads the TSC (false: it is now_ns()).
inline bool stat_clock_is_tsc() noexcept {
  return detail::g_stat_clock.tsc;
}

// CPU time consumed by the calling thread, in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
// A syscall on most kernels: do not call per work item.
inline std::uint64_t thread_cpu_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return timespec_to_ns(ts);
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
  double stat_ns;        // one stat_ns()
};
clock_cost measure_clock_cost();

}  // namespace quiesce
