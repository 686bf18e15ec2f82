// SPDX-License-Identifier: Apache-2.0
// Process exit with work in flight: each scenario of wq_exit_child must exit with status 0
// within 30 s (and, in builds without sanitizers, also under valgrind without errors).
// A child that does not exit in time is killed (SIGKILL) and the test fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "wait.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;

struct outcome {
  bool exited_in_time = false;
  int status = 0;  // waitpid status
};

// Runs argv, waiting for it on a thread of its own; kills it (SIGKILL) at the deadline.
outcome run_with_deadline(const std::vector<std::string>& args, std::chrono::seconds deadline) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    ADD_FAILURE() << "posix_spawnp " << args[0] << ": " << std::strerror(err);
    return {};
  }
  std::mutex lock;
  std::condition_variable cv;
  bool reaped = false;
  int status = 0;
  std::thread waiter([&] {
    int s = 0;
    while (waitpid(pid, &s, 0) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard guard(lock);
      status = s;
      reaped = true;
    }
    cv.notify_all();
  });
  outcome out;
  {
    std::unique_lock guard(lock);
    out.exited_in_time = cv.wait_for(guard, deadline, [&] { return reaped; });
  }
  if (!out.exited_in_time) kill(pid, SIGKILL);
  waiter.join();
  out.status = status;
  return out;
}

std::string describe(const outcome& o) {
  std::ostringstream s;
  if (!o.exited_in_time) s << "did not exit within the deadline (killed); ";
  if (WIFEXITED(o.status)) {
    s << "exit status " << WEXITSTATUS(o.status);
  } else if (WIFSIGNALED(o.status)) {
    s << "killed by signal " << WTERMSIG(o.status);
  }
  return s.str();
}

bool exited_zero(const outcome& o) {
  return o.exited_in_time && WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0;
}

// The child program: QUIESCE_WQ_EXIT_CHILD overrides the one built beside this test (the
// mutant builds point it at a child linked against their library).
std::string child() {
  const char* override_path = std::getenv("QUIESCE_WQ_EXIT_CHILD");
  return override_path && *override_path ? override_path : WQ_EXIT_CHILD;
}

// The allocation-failure program (wq_alloc_child.cpp): QUIESCE_WQ_ALLOC_CHILD overrides the
// one built beside this test (the mutants run theirs).
std::string alloc_child() {
  const char* override_path = std::getenv("QUIESCE_WQ_ALLOC_CHILD");
  return override_path && *override_path ? override_path : WQ_ALLOC_CHILD;
}

[[maybe_unused]] bool valgrind_available() {
  return std::system("valgrind --version >/dev/null 2>&1") == 0;
}

class WqExit : public testing::TestWithParam<const char*> {};

// Guards against exit hanging (or crashing) while work is queued, running, re-queueing
// itself or armed on the timer.
TEST_P(WqExit, ProcessExitsPromptlyAndCleanly) {
  const outcome o = run_with_deadline({child(), GetParam()}, 30s);
  EXPECT_TRUE(exited_zero(o)) << GetParam() << ": " << describe(o);
}

// Guards against exit touching freed or uninitialised memory (static destruction order).
TEST_P(WqExit, ProcessExitsCleanlyUnderValgrind) {
#if WQ_EXIT_VALGRIND
  if (!valgrind_available()) GTEST_SKIP() << "valgrind is not on PATH";
  const outcome o = run_with_deadline(
      {"valgrind", "--error-exitcode=99", "--leak-check=no", "--quiet", child(), GetParam()},
      90s);  // valgrind itself is slow; the exit must still be prompt
  EXPECT_TRUE(exited_zero(o)) << GetParam() << " under valgrind: " << describe(o);
#else
  GTEST_SKIP() << "valgrind runs in builds without sanitizers only";
#endif
}

// A pool whose first worker cannot be created (a thread limit) runs its item once the
// limit allows: the watchdog's tick tries the creation again (kills creation_not_retried).
TEST(WqWorkerCreation, AFailedCreationIsRetriedUntilTheItemRuns) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: lowers nobody's thread limit";
  const outcome o = run_with_deadline({child(), "worker_created_after_limit"}, 30s);
  if (o.exited_in_time && WIFEXITED(o.status) && WEXITSTATUS(o.status) == 4) {
    GTEST_SKIP() << "this root cannot become nobody (uid 65534)";
  }
  EXPECT_TRUE(exited_zero(o)) << describe(o);
}

// A pool whose first worker cannot be created for want of memory (std::bad_alloc) leaves
// its queuer unharmed and runs the item once memory is back (kills
// creation_bad_alloc_not_caught and creation_not_retried).
TEST(WqWorkerCreation, ACreationOutOfMemoryIsRetriedUntilTheItemRuns) {
  const outcome o = run_with_deadline({alloc_child()}, 30s);
  EXPECT_TRUE(exited_zero(o)) << describe(o);
}

// A process-directed signal is handled on an application thread, never on a worker, the
// timer, the watchdog or RCU's callback thread (kills workers_take_signals).
TEST(WqRuntimeThreads, TakeNoAsynchronousSignal) {
  const outcome o = run_with_deadline({child(), "signals_go_to_application_threads"}, 60s);
  EXPECT_TRUE(exited_zero(o)) << describe(o);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, WqExit,
                         testing::Values("requeue_system_wq", "requeue_system_unbound_wq",
                                         "requeue_heap_wq", "requeue_static_wq", "flush_at_exit",
                                         "delayed_system", "delayed_own", "rearm_mod_delayed",
                                         "throw_at_exit", "arm_at_exit", "refused_after_exit",
                                         "static_queue_running_item", "dropped_behind_blocked",
                                         "inactive_behind_blocked", "posted_at_exit"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
