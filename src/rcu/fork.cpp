// SPDX-License-Identifier: Apache-2.0
// fork() without exec: RCU works in the child (liburcu's urcu_*_before_fork,
// after_fork_parent and after_fork_child, and call_rcu_after_fork_child).
//
// Before the fork, the forking thread goes offline in QSBR and Tasks (so a grace period in
// progress can end without it), stops every callback thread at a point between callbacks,
// and takes every RCU lock, so none is held by a thread the child will not have. After it,
// the parent releases everything; the child releases the locks too, keeps only its own
// registry entries (the other threads do not exist there), queues again what the parent's
// callback threads held, and starts new callback threads.
#include <pthread.h>

#include <array>

#include "../base/never_destroyed.hpp"
#include "internal.hpp"

namespace quiesce::detail {

namespace {

// One fork at a time is prepared (the outermost RCU lock). Built on first use, not as a
// global: the runtime's mutex is set up by its constructor (glibc's adaptive kind), which a
// global would run in the dynamic initialization, in no order against another file's.
mutex& fork_lock() {
  static never_destroyed<mutex> lock("rcu fork_lock");
  return lock.get();
}
// W: the forking thread's online state per flavour (indexed by rcu_kind), taken offline
// before the fork and restored after it in parent and child.
thread_local constinit std::array<bool, std::size(all_rcu_kinds)> was_online{};

void go_offline_for_fork() noexcept {
  for (rcu_state* st : all_states()) {
    bool& was = was_online[static_cast<int>(st->kind)];
    was = has_online_state(st->flavor) && rcu_thread_is_online(st->domain);
    if (was) rcu_thread_offline(st->domain);
  }
}

void restore_online() noexcept {
  for (auto it = all_states().rbegin(); it != all_states().rend(); ++it) {
    if (was_online[static_cast<int>((*it)->kind)]) rcu_thread_online((*it)->domain);
  }
}

void lock_all(rcu_state& st) noexcept
    QUIESCE_ACQUIRE(st.gp_mutex, st.registry_lock, st.waiters_lock, st.stats_lock,
                    st.callbacks.start_lock) {
  st.gp_mutex.lock();  // no grace period is in progress from here to the fork
  st.registry_lock.lock();
  st.waiters_lock.lock();
  st.stats_lock.lock();
  st.callbacks.start_lock.lock();
}

void unlock_all(rcu_state& st) noexcept
    QUIESCE_RELEASE(st.gp_mutex, st.registry_lock, st.waiters_lock, st.stats_lock,
                    st.callbacks.start_lock) {
  st.callbacks.start_lock.unlock();
  st.stats_lock.unlock();
  st.waiters_lock.unlock();
  st.registry_lock.unlock();
  release_gp_mutex(st);  // callers of synchronize may sleep until it is free
}

// The three handlers hand the locks from the prepare handler to the parent's and child's
// (pthread_atfork), which the analysis cannot follow; the checked builds assert them held.
void before_fork() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  if (memb_in_section()) {
    // A grace period in progress would wait for this thread, and this thread for it.
    die("fork() called inside a read-side critical section of rcu_default_domain(); "
        "fork outside read-side sections");
  }
  go_offline_for_fork();
  fork_lock().lock();
  // Callbacks first: one may itself wait for a grace period, which needs gp_mutex.
  for (rcu_state* st : all_states())
    pause_callbacks_for_fork(*st);
  for (rcu_state* st : all_states())
    lock_all(*st);
}

void after_fork_parent() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  fork_lock().assert_held();
  for (auto st = all_states().rbegin(); st != all_states().rend(); ++st)
    unlock_all(**st);
  for (rcu_state* st : all_states())
    resume_callbacks_after_fork(*st);
  fork_lock().unlock();
  restore_online();
}

void after_fork_child() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  fork_lock().assert_held();  // the forking thread is the child's only one, with its locks
  for (auto it = all_states().rbegin(); it != all_states().rend(); ++it) {
    rcu_state& st = **it;
    st.registry_lock.assert_held();
    reset_registry_in_child(st);
    st.waiters_lock.assert_held();
    while (rcu_waiter* w = st.waiters.pop_front())  // threads of the parent
      (void)w;
    unlock_all(st);
  }
  for (rcu_state* st : all_states())
    restart_callbacks_in_child(*st);
  fork_lock().unlock();
  restore_online();
}

}  // namespace

void install_fork_handlers() noexcept {
  static const int err = ::pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);
  if (err != 0) die("rcu: cannot install the fork handlers (pthread_atfork: error %d)", err);
}

}  // namespace quiesce::detail
