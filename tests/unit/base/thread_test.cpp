// SPDX-License-Identifier: Apache-2.0
#include "quiesce/thread.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>
#include <string>

#include "quiesce/log.hpp"
#include "quiesce/topology.hpp"

namespace quiesce {
namespace {

std::string comm_of(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(Thread, NamesAreVisibleToTheKernelAndTruncatedTo15Bytes) {
  std::string seen_self, seen_comm;
  std::thread t([&] {
    set_this_thread_name("kworker/0:1H-events_highpri");
    seen_self = this_thread_name();
    seen_comm = comm_of(this_thread_tid());
  });
  t.join();
  EXPECT_EQ(seen_self, "kworker/0:1H-ev");
  EXPECT_EQ(seen_comm, "kworker/0:1H-ev");
}

TEST(Thread, NamedThreadNamesItselfBeforeRunningAndJoinsOnDestruction) {
  std::string seen;
  std::atomic<bool> ran{false};
  {
    named_thread t("q-test", [&] {
      seen = this_thread_name();
      ran = true;
    });
  }  // joins here
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(seen, "q-test");
}

TEST(Thread, PinnedThreadRunsOnlyOnItsCpu) {
  for (int cpu : system_topology().cpus()) {
    int observed = -1;
    bool stayed = true;
    named_thread t("q-pin", cpu_set{cpu}, [&] {
      for (int i = 0; i < 1000; ++i) {
        observed = sched_getcpu();
        if (observed != cpu) stayed = false;
      }
    });
    t.join();
    EXPECT_TRUE(stayed) << "cpu " << cpu << " observed " << observed;
  }
  EXPECT_THROW(pin_this_thread(cpu_set{}), std::invalid_argument);
}

TEST(Thread, PinningToAForbiddenCpuFailsWithoutChangingAnything) {
  const cpu_set before = cpu_set::current_affinity();
  std::thread t([] {
    // CPU 1023 is not online on any machine this runs on; the kernel rejects the mask.
    EXPECT_FALSE(pin_this_thread(cpu_set{1023}));
    EXPECT_EQ(cpu_set::current_affinity(), cpu_set::current_affinity());
  });
  t.join();
  EXPECT_EQ(cpu_set::current_affinity(), before);
}

TEST(Thread, LoweringPriorityIsAlwaysPermittedAndPerThread) {
  const int main_nice = this_thread_nice();
  int seen = 0;
  std::thread t([&] {
    ASSERT_TRUE(set_this_thread_nice(5));
    seen = this_thread_nice();
  });
  t.join();
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(this_thread_nice(), main_nice);
  EXPECT_THROW(set_this_thread_nice(-21), std::invalid_argument);
  EXPECT_THROW(set_this_thread_nice(20), std::invalid_argument);
}

// Runs in a child process that may not raise priority (an unprivileged uid with no
// RLIMIT_NICE allowance): two refusals must produce exactly one report. Exit code 0 = pass.
[[noreturn]] void refuse_priority_twice() {
  const rlimit none{0, 0};
  setrlimit(RLIMIT_NICE, &none);
  if (getuid() == 0 && setuid(65534) != 0) _exit(10);
  log_capture capture;
  const bool first = set_this_thread_nice(-20);
  const bool second = set_this_thread_nice(-10);
  if (first || second) _exit(11);
  if (capture.count("cannot set nice -20") != 1) _exit(12);
  if (capture.count("CAP_SYS_NICE") != 1) _exit(13);
  if (capture.lines().size() != 1) _exit(14);
  _exit(0);
}

TEST(ThreadDeathTest, RefusedPriorityIsReportedOnceWithTheReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(refuse_priority_twice(), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace quiesce
