// SPDX-License-Identifier: Apache-2.0
// Test helpers: finding one of the runtime's threads by name, and holding it off the CPU
// (SCHED_IDLE, on the test thread's CPU) for a window in which the test must run first -
// how the wake-up tests make "before the thread runs" deterministic.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cerrno>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>

namespace quiesce::test {

// The thread of this process named `name` (its comm), or 0.
inline pid_t thread_named(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) return std::stoi(task.path().filename());
  }
  return 0;
}

// Whether a thread may leave SCHED_IDLE here: only where its nice value is allowed
// (RLIMIT_NICE, or CAP_SYS_NICE). Tried on a thread of our own, so that a runtime thread is
// never left idle-class for the tests after the one that asks.
inline bool may_leave_sched_idle() {
  bool may = false;
  std::thread([&may] {
    const sched_param none{};
    may = ::sched_setscheduler(0, SCHED_IDLE, &none) == 0 &&
          ::sched_setscheduler(0, SCHED_OTHER, &none) == 0;
  }).join();
  return may;
}

// While it lives, `thread` runs at SCHED_IDLE on the calling thread's CPU, and the caller is
// pinned there: the thread runs only when the caller sleeps. Both get their scheduling
// class and affinity back when it dies. Check may_leave_sched_idle() first. Throws
// std::system_error (the test fails) if the kernel refuses a change.
class hold_off_cpu {
 public:
  explicit hold_off_cpu(pid_t thread) : thread_(thread) {
    cpu_set_t here;
    check(::sched_getaffinity(0, sizeof(all_), &all_), "sched_getaffinity");
    CPU_ZERO(&here);
    CPU_SET(::sched_getcpu(), &here);
    try {
      check(::sched_setaffinity(0, sizeof(here), &here), "pinning the test thread");
      const sched_param none{};
      check(::sched_setscheduler(thread_, SCHED_IDLE, &none), "SCHED_IDLE");
      check(::sched_setaffinity(thread_, sizeof(here), &here), "pinning the held thread");
    } catch (...) {
      (void)restore();  // what was changed before the refusal
      throw;
    }
  }
  ~hold_off_cpu() { EXPECT_TRUE(restore()) << "the held thread's scheduling was not restored"; }
  hold_off_cpu(const hold_off_cpu&) = delete;
  hold_off_cpu& operator=(const hold_off_cpu&) = delete;

 private:
  bool restore() noexcept {
    const sched_param none{};
    const bool policy = ::sched_setscheduler(thread_, SCHED_OTHER, &none) == 0;
    const bool held = ::sched_setaffinity(thread_, sizeof(all_), &all_) == 0;
    const bool self = ::sched_setaffinity(0, sizeof(all_), &all_) == 0;
    return policy && held && self;
  }
  static void check(int rc, const char* what) {
    if (rc != 0) throw std::system_error(errno, std::generic_category(), what);
  }
  pid_t thread_;
  cpu_set_t all_{};
};

}  // namespace quiesce::test
