// SPDX-License-Identifier: Apache-2.0
// Futex wake-ups deferred until the waker releases its lock. Waking a thread that must
// first take the lock the waker still holds makes it sleep again, on that lock: a second
// sleep, a second wake-up, two more context switches (the kernel's wake-ups under a
// raw spinlock have the wakee spin instead). detail::mutex and its guards
// (mutex.hpp) run the calling thread's deferred wake-ups whenever they
// release a lock, and before a condition-variable wait releases one natively.
//
// A word must outlive its wake-up (the workqueue's are in its pools, which are never
// destroyed). A wake-up that arrives late, or for a thread that no longer waits there, is
// a spurious wake-up, which every futex waiter tolerates. Thread-local; not installed.
#pragma once

#include <atomic>
#include <cstdint>

#include "futex.hpp"

namespace quiesce::detail {

struct deferred_wakes {
  static constexpr int capacity = 4;
  std::atomic<std::uint32_t>* words[capacity] = {};
  int count = 0;
};
inline constinit thread_local deferred_wakes tls_deferred_wakes;  // W

// Wakes one sleeper on `word` once the calling thread releases its lock (at once if four
// are already waiting to be sent).
inline void defer_wake_one(std::atomic<std::uint32_t>& word) noexcept {
  deferred_wakes& d = tls_deferred_wakes;
  if (d.count == deferred_wakes::capacity) {
    futex_wake_one(word);
    return;
  }
  d.words[d.count++] = &word;
}

inline void run_deferred_wakes() noexcept {
  deferred_wakes& d = tls_deferred_wakes;
  while (d.count > 0)
    futex_wake_one(*d.words[--d.count]);
}

}  // namespace quiesce::detail
