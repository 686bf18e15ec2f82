// SPDX-License-Identifier: Apache-2.0
// The clocks: thread CPU time, their measured costs, and stat_ns()'s calibration.
#include "quiesce/clock.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

namespace quiesce {

namespace detail {
stat_clock_scale g_stat_clock;  // I: written once by the load-time calibration below
}  // namespace detail

namespace {

#if defined(__x86_64__)
// CPUID 0x80000007 EDX bit 8: the TSC ticks at a constant rate in every P-, C- and T-state.
bool tsc_invariant() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 8)) != 0;
}

// The kernel keeps time with the TSC only once it has found it synchronised across CPUs
// (and it switches away if it stops trusting it).
bool kernel_clocksource_is_tsc() noexcept {
  std::FILE* f =
      std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!f) return false;
  char buf[32] = {};
  const bool ok = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  return ok && std::strcmp(buf, "tsc\n") == 0;
}

// A (TSC, CLOCK_MONOTONIC) pair: the tick is the middle of the tightest of a few bracketing
// reads, so the pair's error is a few ns.
void sample(std::uint64_t& tick, std::uint64_t& ns) noexcept {
  std::uint64_t best = ~std::uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t1 = __builtin_ia32_rdtsc();
    const std::uint64_t m = now_ns();
    const std::uint64_t t2 = __builtin_ia32_rdtsc();
    if (t2 > t1 && t2 - t1 < best) {
      best = t2 - t1;
      tick = t1 + (t2 - t1) / 2;
      ns = m;
    }
  }
}

void calibrate_stat_clock() noexcept {
  if (!tsc_invariant() || !kernel_clocksource_is_tsc()) return;
  std::uint64_t t0 = 0, n0 = 0, t1 = 0, n1 = 0;
  sample(t0, n0);
  while (now_ns() - n0 < 1'000'000) {  // ~1 ms: the pairs' few-ns errors become ~1e-5
  }
  sample(t1, n1);
  if (t1 <= t0 || n1 <= n0) return;
  detail::stat_clock_scale s;
  s.mult = static_cast<std::uint64_t>((static_cast<unsigned __int128>(n1 - n0) << 32) / (t1 - t0));
  if (s.mult == 0) return;
  s.base_tick = t1;
  s.base_ns = n1;
  s.tsc = true;
  detail::g_stat_clock = s;
}
#else
void calibrate_stat_clock() noexcept {}
#endif

// Before every other static initialiser of the library (priority 101), so the runtime's
// first timestamps already use the final scale.
struct stat_clock_init {
  stat_clock_init() noexcept { calibrate_stat_clock(); }
};
__attribute__((init_priority(101))) const stat_clock_init g_stat_clock_init;

}  // namespace

std::uint64_t thread_cpu_ns(clockid_t thread_clock) noexcept {
  timespec ts;
  if (clock_gettime(thread_clock, &ts) != 0) return 0;
  return timespec_to_ns(ts);
}

namespace {

// Median over `batches` of the per-call cost of `reads` back-to-back calls of `read`,
// timed with the monotonic clock. The loop keeps the results live so none is elided.
template <typename Read>
double median_cost_ns(Read read, int reads, int batches) {
  std::array<double, 15> per_call{};
  const int n = std::min<int>(batches, static_cast<int>(per_call.size()));
  std::uint64_t sink = 0;
  for (int b = 0; b < n; ++b) {
    const std::uint64_t start = now_ns();
    for (int i = 0; i < reads; ++i)
      sink += read();
    per_call[static_cast<std::size_t>(b)] = static_cast<double>(now_ns() - start) / reads;
  }
  std::sort(per_call.begin(), per_call.begin() + n);
  // Fold the accumulated results into something observable but harmless.
  asm volatile("" : : "r"(sink) : "memory");
  return per_call[static_cast<std::size_t>(n / 2)];
}

}  // namespace

clock_cost measure_clock_cost() {
  clock_cost cost;
  cost.monotonic_ns = median_cost_ns([] { return now_ns(); }, 2000, 15);
  cost.thread_cpu_ns = median_cost_ns([] { return thread_cpu_ns(); }, 200, 15);
  cost.stat_ns = median_cost_ns([] { return stat_ns(); }, 2000, 15);
  return cost;
}

}  // namespace quiesce
