// SPDX-License-Identifier: Apache-2.0
// Futex wait/wake on a std::atomic<uint32_t>, for the runtime's blocking waits.
//
// Why not std::atomic::wait: libstdc++'s wait spins with sched_yield() before it sleeps.
// With CPU-bound threads on every CPU (a grace period waiting on busy readers), a yield
// hands the CPU to them until the next scheduler tick (4 ms here), which turned a 10 us
// wake-up into milliseconds. Callers do their own short spin, then sleep here at once.
// Not installed.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

namespace quiesce::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// Sleeps while `word` holds `expected` (returns at once if it does not; may return
// spuriously: callers re-check their condition).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
            nullptr, nullptr, 0);
}

// Sleeps while `word` holds `expected`, until `deadline_ns` (CLOCK_MONOTONIC, absolute;
// now_ns()'s clock) at the latest. Returns false if the deadline passed, true otherwise
// (woken, spurious, or the word differed).
inline bool futex_wait_until(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                             std::uint64_t deadline_ns) noexcept {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000u),
              static_cast<long>(deadline_ns % 1'000'000'000u)};
  const long rc =
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_BITSET_PRIVATE,
                expected, &ts, nullptr, FUTEX_BITSET_MATCH_ANY);
  return !(rc != 0 && errno == ETIMEDOUT);
}

// Wakes one thread sleeping on `word`.
inline void futex_wake_one(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
}

// Wakes every thread sleeping on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX,
            nullptr, nullptr, 0);
}

}  // namespace quiesce::detail
