// SPDX-License-Identifier: Apache-2.0
// Test helpers: finding one of the runtime's threads by name, and holding it off the CPU
// (SCHED_IDLE, on the test thread's CPU) for a window in which the test must run first -
// how the wake-up tests make "before the thread runs" happen - and telling whether it ran
// all the same: SCHED_IDLE makes a run unlikely, not impossible (the kernel's EEVDF picks the
// one eligible task when the test thread's slice ends; under load about one window in two
// here), so such a test repeats its window until one in which the thread did not run.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cerrno>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>

namespace quiesce::test {

// The times `thread` (of this process) has been switched out, ever: voluntary and not
// (/proc/self/task/TID/status). Throws std::runtime_error if it cannot be read.
inline std::uint64_t context_switches(pid_t thread) {
  std::ifstream status("/proc/self/task/" + std::to_string(thread) + "/status");
  std::uint64_t total = 0;
  int found = 0;
  for (std::string line; std::getline(status, line);) {
    for (const char* key : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
      if (line.starts_with(key)) {
        total += std::stoull(line.substr(std::string_view(key).size()));
        ++found;
      }
    }
  }
  if (found != 2)
    throw std::runtime_error("no context switch counts for thread " + std::to_string(thread));
  return total;
}

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
// pinned there: the thread runs, as a rule, only when the caller sleeps - thread_ran() says
// whether it ran all the same. Both get their scheduling class and affinity back when it
// dies. Check may_leave_sched_idle() first. Throws std::system_error (the test fails) if the
// kernel refuses a change.
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
      // (A thread running elsewhere is moved here before sched_setaffinity returns: a switch
      // counted before this count.)
      switches_ = context_switches(thread_);
    } catch (...) {
      (void)restore();  // what was changed before the refusal
      throw;
    }
  }
  // Whether the held thread has run since the hold began. Ask from the held CPU (the caller
  // is pinned there): the thread is then not running, so a run since has ended in a switch
  // that its counts show.
  bool thread_ran() const { return context_switches(thread_) != switches_; }
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
  std::uint64_t switches_ = 0;  // the held thread's context switches when the hold began
};

}  // namespace quiesce::test
