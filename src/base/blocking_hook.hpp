// SPDX-License-Identifier: Apache-2.0
// The per-thread hook for voluntary blocking: the user-space form of the kernel's
// scheduler hook (wq_worker_sleeping / wq_worker_running).
//
// Every blocking wait in quiesce (flush, cancel_sync, drain, rcu_synchronize, rcu_barrier,
// may_block) opens an rcu_voluntary_block scope; that scope calls the calling thread's hook
// on entry and exit. The workqueue installs a hook on each of its workers, so a work item
// that blocks in quiesce leaves its pool's concurrency management and another worker may
// start the pool's pending items. On other threads the hook is empty. Not installed.
#pragma once

namespace quiesce::detail {

struct blocking_hook {
  // Called on entry to and exit from a voluntary block, on the owning thread, with no
  // runtime lock held by the caller. Nested blocks call them again (the hook counts).
  void (*enter)(void* ctx) noexcept = nullptr;
  void (*leave)(void* ctx) noexcept = nullptr;
  void* ctx = nullptr;
};

// W: the owning thread only.
inline thread_local blocking_hook tls_blocking_hook;

}  // namespace quiesce::detail
