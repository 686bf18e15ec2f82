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
#include <climits>
#include <cstdint>

namespace quiesce::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// Sleeps while `word` holds `expected` (returns at once if it does not; may return
// spuriously: callers re-check their condition).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
            nullptr, nullptr, 0);
}

// Wakes every thread sleeping on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX,
            nullptr, nullptr, 0);
}

}  // namespace quiesce::detail
