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

#include <mutex>

#include "internal.hpp"

namespace quiesce::detail {

namespace {

std::mutex fork_lock;  // one fork at a time is prepared (outermost RCU lock)
// W: the forking thread's online state, restored after the fork in parent and child.
thread_local constinit bool was_online_qsbr = false;
thread_local constinit bool was_online_tasks = false;

template <typename F>
void for_each_state(F f) noexcept {
  std::size_t n = 0;
  rcu_state* const* states = all_states(n);
  for (std::size_t i = 0; i < n; ++i)
    f(*states[i]);
}

template <typename F>
void for_each_state_reversed(F f) noexcept {
  std::size_t n = 0;
  rcu_state* const* states = all_states(n);
  for (std::size_t i = n; i-- > 0;)
    f(*states[i]);
}

void restore_online() noexcept {
  if (was_online_tasks) rcu_thread_online(rcu_tasks_domain());
  if (was_online_qsbr) rcu_thread_online(rcu_qsbr_domain());
}

void unlock_all(rcu_state& st) noexcept {
  st.callbacks.start_lock.unlock();
  st.stats_lock.unlock();
  st.waiters_lock.unlock();
  st.registry_lock.unlock();
  st.gp_mutex.unlock();
}

void before_fork() noexcept {
  if ((tls_memb.word.load(std::memory_order_relaxed) & memb_nest_mask) != 0) {
    // A grace period in progress would wait for this thread, and this thread for it.
    die("fork() called inside a read-side critical section of rcu_default_domain(); "
        "fork outside read-side sections");
  }
  was_online_qsbr = rcu_thread_is_online(rcu_qsbr_domain());
  was_online_tasks = rcu_thread_is_online(rcu_tasks_domain());
  if (was_online_qsbr) rcu_thread_offline(rcu_qsbr_domain());
  if (was_online_tasks) rcu_thread_offline(rcu_tasks_domain());
  fork_lock.lock();
  // Callbacks first: one may itself wait for a grace period, which needs gp_mutex.
  for_each_state([](rcu_state& st) { pause_callbacks_for_fork(st); });
  for_each_state([](rcu_state& st) {
    st.gp_mutex.lock();  // no grace period is in progress from here to the fork
    st.registry_lock.lock();
    st.waiters_lock.lock();
    st.stats_lock.lock();
    st.callbacks.start_lock.lock();
  });
}

void after_fork_parent() noexcept {
  for_each_state_reversed([](rcu_state& st) { unlock_all(st); });
  for_each_state([](rcu_state& st) { resume_callbacks_after_fork(st); });
  fork_lock.unlock();
  restore_online();
}

void after_fork_child() noexcept {
  for_each_state_reversed([](rcu_state& st) {
    reset_registry_in_child(st);                    // under registry_lock, still held
    while (rcu_waiter* w = st.waiters.pop_front())  // threads of the parent
      (void)w;
    unlock_all(st);
  });
  for_each_state([](rcu_state& st) { restart_callbacks_in_child(st); });
  fork_lock.unlock();
  restore_online();
}

}  // namespace

void install_fork_handlers() noexcept {
  static const int err = ::pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);
  if (err != 0) die("rcu: cannot install the fork handlers (pthread_atfork: error %d)", err);
}

}  // namespace quiesce::detail
