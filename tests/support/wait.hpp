// SPDX-License-Identifier: Apache-2.0
// Test helpers: wait for conditions, never for time. Every wait has a generous deadline
// (60 s) after which the test fails loudly instead of hanging.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "quiesce/clock.hpp"

namespace quiesce::test {

inline constexpr std::chrono::seconds generous{60};

// A one-shot event: open() once, wait() until opened.
class gate {
 public:
  // Notifies under the lock: the waiter may destroy the gate as soon as wait() returns,
  // and wait() cannot return before the lock is released.
  void open() {
    std::lock_guard guard(lock_);
    open_ = true;
    cv_.notify_all();
  }
  // True once open; false (with a test failure) if the deadline passed.
  bool wait(std::chrono::nanoseconds deadline = generous) {
    std::unique_lock guard(lock_);
    if (cv_.wait_for(guard, deadline, [&] { return open_; })) return true;
    ADD_FAILURE() << "gate not opened within " << deadline.count() / 1'000'000 << " ms";
    return false;
  }
  bool is_open() {
    std::lock_guard guard(lock_);
    return open_;
  }

 private:
  std::mutex lock_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Polls `pred` (yielding the CPU between checks) until true or the deadline passes. For
// conditions nobody can signal: a log line appearing, a thread falling asleep.
template <typename Pred>
bool eventually(Pred pred, std::chrono::nanoseconds deadline = generous) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(deadline.count());
  while (!pred()) {
    if (now_ns() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// The scheduler state letter of a thread of this process ('S' = sleeping).
inline char thread_state(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
}

// Runs `fn` on a thread of its own and waits for it to return. If it has not returned by
// the deadline, the code under test is deadlocked: prints "FAILED: <what> did not return
// within N s (deadlock)" to stderr and aborts the process (CTest reports the test as
// failed), so a deadlock never hangs the suite.
template <typename F>
void finishes_or_abort(F fn, std::chrono::nanoseconds deadline, const char* what) {
  std::mutex lock;
  std::condition_variable cv;
  bool done = false;
  std::thread runner([&] {
    fn();
    {
      std::lock_guard guard(lock);
      done = true;
    }
    cv.notify_all();
  });
  {
    std::unique_lock guard(lock);
    if (!cv.wait_for(guard, deadline, [&] { return done; })) {
      std::fprintf(stderr, "FAILED: %s did not return within %lld s (deadlock)\n", what,
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::seconds>(deadline).count()));
      std::fflush(stderr);
      std::abort();
    }
  }
  runner.join();
}

}  // namespace quiesce::test
