// SPDX-License-Identifier: Apache-2.0
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

#include "../base/blocking_hook.hpp"
#include "../base/futex.hpp"
#include "internal.hpp"
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

// Blocks until done() is true. done() must read seq_cst atomics (or take locks).
template <typename Pred>
void wait_for_completion(Pred done) {
  wait_scope blocking;
  completion_waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = completion_seq.load(std::memory_order_seq_cst);
    if (done()) break;
    futex_wait(completion_seq, seen);
  }
  completion_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace quiesce::detail
