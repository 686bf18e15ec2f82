// SPDX-License-Identifier: Apache-2.0
// The cyclictest-style probe: a CPU held by a SCHED_FIFO busy loop of known length shows
// up as at least that lateness on the probe of that CPU.
#include "quiesce/cyclic_probe.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;

TEST(CyclicProbe, ABusyLoopHoldingTheCpuIsSeenAsAtLeastItsLength) {
  const int cpu = cpu_set::current_affinity().cpus().back();
  cyclic_probe probe({.period = 1ms, .cpus = cpu_set{cpu}, .fifo_priority = 0});
  probe.begin_window();
  ASSERT_TRUE(test::eventually([&] { return probe.samples() >= 3; })) << "the probe never woke";

  // A SCHED_FIFO thread pinned to the probe's CPU spins for `hold`: a SCHED_OTHER thread
  // on that CPU cannot run meanwhile, so the first deadline after the spin began is met
  // at least hold - period late.
  constexpr std::uint64_t hold_ns = 30'000'000, period_ns = 1'000'000;
  int fifo_error = 0;
  std::uint64_t held_ns = 0;
  {
    named_thread blocker("blocker", cpu_set{cpu}, [&] {
      sched_param sp{};
      sp.sched_priority = 1;
      fifo_error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
      if (fifo_error != 0) return;
      const std::uint64_t start = now_ns();
      while (now_ns() - start < hold_ns) {
      }
      held_ns = now_ns() - start;
    });
  }
  if (fifo_error == EPERM)
    GTEST_SKIP() << "SCHED_FIFO not permitted here: " << std::strerror(fifo_error);
  ASSERT_EQ(fifo_error, 0) << std::strerror(fifo_error);
  // The late wake-up is recorded once the probe runs again: wait for two more samples.
  const std::uint64_t after = probe.samples();
  ASSERT_TRUE(test::eventually([&] { return probe.samples() >= after + 2; }));

  const std::vector<cpu_lateness> window = probe.end_window();
  ASSERT_EQ(window.size(), 1u);
  EXPECT_EQ(window[0].cpu, cpu);
  EXPECT_GE(held_ns, hold_ns);
  EXPECT_GE(window[0].late_ns.max(), static_cast<double>(hold_ns - period_ns))
      << "max lateness " << window[0].late_ns.max() / 1e6 << " ms after a " << held_ns / 1e6
      << " ms hold";
  EXPECT_GE(window[0].late_hist_ns.max(), hold_ns - period_ns);
  EXPECT_GE(window[0].overruns, 1u);  // the skipped deadlines are counted, not replayed
}

TEST(CyclicProbe, OneThreadPerCpuAndNothingRecordedOutsideAWindow) {
  cyclic_probe probe;
  EXPECT_EQ(probe.cpus(), cpu_set::current_affinity());
  EXPECT_EQ(probe.samples(), 0u);  // no window yet
  probe.begin_window();
  // Every CPU's probe wakes (a CPU may be held a while by another test's SCHED_FIFO thread).
  for (int cpu : probe.cpus())
    ASSERT_TRUE(test::eventually([&] { return probe.samples(cpu) >= 2; })) << "cpu " << cpu;
  EXPECT_EQ(probe.samples(100000), 0u);
  const auto window = probe.end_window();
  ASSERT_EQ(window.size(), probe.cpus().size());
  for (std::size_t i = 0; i < window.size(); ++i) {
    EXPECT_EQ(window[i].cpu, probe.cpus().cpus()[i]);
    EXPECT_GT(window[i].late_ns.count(), 0u) << "cpu " << window[i].cpu;
  }
}

TEST(CyclicProbe, BadOptionsAreRefused) {
  EXPECT_THROW(cyclic_probe({.period = 0ms, .cpus = {}, .fifo_priority = 0}),
               std::invalid_argument);
  EXPECT_THROW(cyclic_probe({.period = 1ms, .cpus = cpu_set{1000}, .fifo_priority = 0}),
               std::invalid_argument);
  EXPECT_THROW(cyclic_probe({.period = 1ms, .cpus = {}, .fifo_priority = 100}),
               std::invalid_argument);
}

TEST(CyclicProbe, RunsSchedFifoWhenAskedAndPermitted) {
  cyclic_probe fair;
  EXPECT_FALSE(fair.realtime());
  cyclic_probe rt({.period = 1ms, .cpus = {}, .fifo_priority = 1});
  sched_param sp{};
  sp.sched_priority = 1;
  // Whether this process may use SCHED_FIFO at all: ask for it on a scratch thread.
  int err = 0;
  named_thread("fifo-check", [&] { err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); });
  EXPECT_EQ(rt.realtime(), err == 0) << std::strerror(err);
}

TEST(CyclicProbe, SplitMergesTheOtherCpus) {
  std::vector<cpu_lateness> window(3);
  for (int i = 0; i < 3; ++i) {
    window[static_cast<std::size_t>(i)].cpu = i;
    for (int k = 1; k <= 4; ++k) {
      window[static_cast<std::size_t>(i)].late_ns.add(1000.0 * (i + 1) * k);
      window[static_cast<std::size_t>(i)].late_hist_ns.record(
          static_cast<std::uint64_t>(1000 * (i + 1) * k));
    }
    window[static_cast<std::size_t>(i)].overruns = static_cast<std::uint64_t>(i);
  }
  const lateness_split s = split_lateness(window, 1);
  EXPECT_EQ(s.on.cpu, 1);
  EXPECT_EQ(s.on.late_ns.count(), 4u);
  EXPECT_DOUBLE_EQ(s.on.late_ns.max(), 8000.0);
  EXPECT_EQ(s.on.overruns, 1u);
  EXPECT_EQ(s.others.cpu, -1);
  EXPECT_EQ(s.others.late_ns.count(), 8u);
  EXPECT_DOUBLE_EQ(s.others.late_ns.max(), 12000.0);
  EXPECT_DOUBLE_EQ(s.others.late_ns.min(), 1000.0);
  EXPECT_EQ(s.others.late_hist_ns.count(), 8u);
  EXPECT_EQ(s.others.overruns, 2u);  // cpu 0's 0 + cpu 2's 2
  const lateness_split absent = split_lateness(window, 7);
  EXPECT_EQ(absent.on.late_ns.count(), 0u);
  EXPECT_EQ(absent.others.late_ns.count(), 12u);
}

}  // namespace
}  // namespace quiesce
