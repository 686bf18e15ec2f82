// SPDX-License-Identifier: Apache-2.0
#include "quiesce/clock.hpp"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

namespace quiesce {
namespace {

TEST(Clock, MonotonicNeverGoesBackwards) {
  std::uint64_t previous = now_ns();
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t t = now_ns();
    ASSERT_GE(t, previous);
    previous = t;
  }
}

TEST(Clock, MonotonicAgreesAcrossThreads) {
  // A timestamp taken in one thread and published must not be later than one taken after
  // reading it in another: the property queue->start latencies rely on.
  for (int round = 0; round < 100; ++round) {
    std::atomic<std::uint64_t> published{0};
    std::thread writer([&] { published.store(now_ns(), std::memory_order_release); });
    std::uint64_t seen = 0;
    while ((seen = published.load(std::memory_order_acquire)) == 0)
      std::this_thread::yield();
    EXPECT_LE(seen, now_ns());
    writer.join();
  }
}

TEST(Clock, ThreadCpuTimeAdvancesWithWork) {
  const std::uint64_t start = thread_cpu_ns();
  volatile std::uint64_t x = 0;
  // Spin until the CPU clock moves; bounded so a broken clock fails instead of hanging.
  for (std::uint64_t i = 0; i < 20'000'000'000ull && thread_cpu_ns() == start; ++i)
    x = x + i;
  EXPECT_GT(thread_cpu_ns(), start);
}

TEST(Clock, ThreadCpuTimeOfAnotherThread) {
  clockid_t cid;
  ASSERT_EQ(pthread_getcpuclockid(pthread_self(), &cid), 0);
  const std::uint64_t mine = thread_cpu_ns(cid);
  EXPECT_GT(mine, 0u);
  // An invalid clock id reads as 0 rather than failing.
  EXPECT_EQ(thread_cpu_ns(static_cast<clockid_t>(-1000)), 0u);
}

TEST(Clock, MeasuredCostIsAPositiveNumber) {
  const clock_cost cost = measure_clock_cost();
  EXPECT_GT(cost.monotonic_ns, 0.0);
  EXPECT_GT(cost.thread_cpu_ns, 0.0);
  EXPECT_TRUE(std::isfinite(cost.monotonic_ns));
  EXPECT_TRUE(std::isfinite(cost.thread_cpu_ns));
  EXPECT_GT(cost.stat_ns, 0.0);
  EXPECT_TRUE(std::isfinite(cost.stat_ns));
}

// stat_ns() never goes backwards on one thread, and it runs at CLOCK_MONOTONIC's rate: an
// interval of >= 20 ms measured on both clocks agrees within 1% (the calibration's error is
// ~1e-5; a wrong scale - ticks taken for ns, a lost shift - is off by orders of magnitude).
TEST(Clock, StatClockRunsAtTheMonotonicRate) {
  std::uint64_t previous = stat_ns();
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t t = stat_ns();
    ASSERT_GE(t, previous);
    previous = t;
  }
  const std::uint64_t s0 = stat_ns(), m0 = now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t s1 = stat_ns(), m1 = now_ns();
  const double ratio = static_cast<double>(s1 - s0) / static_cast<double>(m1 - m0);
  EXPECT_NEAR(ratio, 1.0, 0.01) << "stat clock source: "
                                << (stat_clock_is_tsc() ? "tsc" : "monotonic");
  // It started at now_ns() when the library loaded and has not wandered far from it (the
  // drift bound: 1% of the process's age, plus a millisecond).
  const std::uint64_t s = stat_ns(), m = now_ns();
  const std::uint64_t gap = s > m ? s - m : m - s;
  EXPECT_LT(gap, 1'000'000u + (m - detail::g_stat_clock.base_ns) / 100);
}

}  // namespace
}  // namespace quiesce
