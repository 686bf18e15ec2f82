#include "quiesce/clock.hpp"

#include <algorithm>
#include <array>

namespace quiesce {

std::uint64_t thread_cpu_ns(clockid_t thread_clock) noexcept {
  timespec ts;
  if (clock_gettime(thread_clock, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
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
  return cost;
}

}  // namespace quiesce
