// Waiting for work instances to finish (flush, cancel_sync, drain) without polling.
//
// Finishing or cancelling an instance changes atomics that waiters' predicates read, then
// calls notify_completion(). A waiter registers, reads the sequence, checks its predicate
// and sleeps on the sequence (futex) until it changes. Registration and the sequence are
// seq_cst on both sides (Dekker): either the finisher sees the waiter and bumps the
// sequence, or the waiter's predicate sees the finished state.
#pragma once

#include <atomic>
#include <cstdint>

#include "../base/futex.hpp"
#include "quiesce/rcu.hpp"

namespace quiesce::detail {

extern std::atomic<std::uint32_t> completion_seq;  // A: bumped when waiters exist
extern std::atomic<int> completion_waiters;        // A: threads inside wait_for_completion

inline void notify_completion() noexcept {
  if (completion_waiters.load(std::memory_order_seq_cst) > 0) {
    completion_seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(completion_seq);
  }
}

// Blocks until done() is true. done() must read seq_cst atomics (or take locks).
// Blocking here is voluntary: an RCU Tasks quiescent state for the wait.
template <typename Pred>
void wait_for_completion(Pred done) {
  rcu_voluntary_block blocking;
  completion_waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = completion_seq.load(std::memory_order_seq_cst);
    if (done()) break;
    futex_wait(completion_seq, seen);
  }
  completion_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace quiesce::detail
