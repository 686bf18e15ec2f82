// SPDX-License-Identifier: Apache-2.0
// Waiting for work instances to finish (flush, cancel_sync, drain) without polling.
//
// A waiter waits on what it waits for: a work item (work::flush, cancel_sync) or a queue
// (workqueue::flush, drain). Finishing or cancelling an instance changes atomics that
// waiters' predicates read, then calls notify_completion() with the item or the queue whose
// state changed. Waits and notifications meet on a channel - one of 64, by the key's
// address - holding a count of waiters and a sequence: a waiter registers on its key's
// channel, reads the sequence, checks its predicate and sleeps on the sequence (futex)
// until it changes. Registration and the sequence are seq_cst on both sides (Dekker): either
// the finisher sees the waiter and bumps the sequence, or the waiter's predicate sees the
// finished state. A waiter is woken only by its own key's changes and those of keys sharing
// its channel (it re-checks and sleeps again); a finisher pays a system call only when its
// channel has waiters. (One channel for everything, until 2026-12, woke every flusher at every
// item's end in the process, and made every end a system call while anyone flushed anything:
// a thread flushing one queue cut another queue's throughput eightfold here.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../base/blocking_hook.hpp"
#include "../base/cache_line.hpp"
#include "../base/futex.hpp"
#include "internal.hpp"
#include "quiesce/rcu.hpp"

namespace quiesce::detail {

// One meeting point of waits and notifications (see above).
struct alignas(cache_line) completion_channel {
  std::atomic<std::uint32_t> seq{0};  // A: bumped when waiters exist
  std::atomic<int> waiters{0};        // A: threads inside wait_for_completion on this channel
};
inline constexpr std::size_t completion_channel_count = 64;
extern completion_channel completion_channels[completion_channel_count];

// The channel of `key` (a work item's or a queue's address; only the address is used, so
// a key may be an item its function has destroyed). Fibonacci hashing of the address.
inline completion_channel& channel_of(const void* key) noexcept {
  if (mutant::one_completion_channel) return completion_channels[0];
  const auto a = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
  return completion_channels[((a >> 4) * 0x9E3779B97F4A7C15ull) >> 58];
}
static_assert(completion_channel_count == 64, "channel_of takes the top 6 bits");
// channel_of as the library computes it - a mutant build's too: for the tests, which are
// compiled once for every build and must not use the inline one.
completion_channel& completion_channel_for(const void* key) noexcept;

// The state waiters on `key` read has changed.
inline void notify_completion(const void* key) noexcept {
  completion_channel& c = channel_of(key);
  if (c.waiters.load(std::memory_order_seq_cst) > 0) {
    c.seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(c.seq);
  }
}

// A blocking wait of the workqueue: a voluntary block, so on a worker the pool may start
// another worker meanwhile (the blocking hook), and an RCU Tasks quiescent state.
class wait_scope {
 public:
  wait_scope() noexcept = default;
  wait_scope(const wait_scope&) = delete;
  wait_scope& operator=(const wait_scope&) = delete;

 private:
  // The waits_keep_running mutant hides the blocking hook from the workqueue's own waits.
  struct hook_hider {
    blocking_hook saved = tls_blocking_hook;
    hook_hider() noexcept {
      if (mutant::waits_keep_running) tls_blocking_hook = blocking_hook{};
    }
    ~hook_hider() { tls_blocking_hook = saved; }
  };
  hook_hider hider_;
  rcu_voluntary_block block_;
};

// Blocks until done() is true; done() reads only state whose changes are notified with
// `key`, as seq_cst atomics (or under locks).
template <typename Pred>
void wait_for_completion(const void* key, Pred done) {
  wait_scope blocking;
  completion_channel& c = channel_of(key);
  c.waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = c.seq.load(std::memory_order_seq_cst);
    if (done()) break;
    futex_wait(c.seq, seen);
  }
  c.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace quiesce::detail
