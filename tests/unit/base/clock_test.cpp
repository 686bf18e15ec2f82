#include "quiesce/clock.hpp"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
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
}

}  // namespace
}  // namespace quiesce
