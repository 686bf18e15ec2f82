// SPDX-License-Identifier: Apache-2.0
// Queueing: the pending bit and disabling (cancel_sync in progress), refusals (draining,
// exit), non-reentrancy across pools, flush-color assignment and max_active activation.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/trace.hpp"

namespace quiesce {

namespace detail {

namespace {

// Trace events carry now_ns() (the trace's clock), read only when tracing is on; the
// runtime's own timestamps are stat_ns() (clock.hpp).
void trace_activate(work& item) {
  if (!trace::enabled()) return;
  trace::emit({.ts_ns = now_ns(),
               .name = trace::workqueue_activate_work,
               .category = "workqueue",
               .str_key = "function",
               .str_val = state_of(item).trace_name,
               .num_key = "work",
               .num_val = reinterpret_cast<std::uintptr_t>(&item)});
}

void trace_queue(work& item, const wq_impl& wq) {
  if (!trace::enabled()) return;
  trace::emit({.ts_ns = now_ns(),
               .name = trace::workqueue_queue_work,
               .category = "workqueue",
               .str_key = "function",
               .str_val = state_of(item).trace_name,
               .str2_key = "workqueue",
               .str2_val = wq.trace_name,
               .num_key = "work",
               .num_val = reinterpret_cast<std::uintptr_t>(&item)});
}

// Marks `item` counted in nr_active (the caller took its slot) and traces it.
void mark_active(work& item) {
  state_of(item).active = true;
  trace_activate(item);  // the kernel traces immediate activation too
}

// Marks `item` active and pushes it on its pwq's pool; `now` is its activation time.
void activate(work& item, std::uint64_t now) {
  mark_active(item);
  push_work(*state_of(item).pwq_of->pool, item, now);
}

// Counts `item` in q's current flush color (see pwq::color) and returns that color.
int count_in_flush_color(pwq& q) {
  for (;;) {
    const int color = q.color.load(std::memory_order_seq_cst);
    // (The mutants are preempted here, as a queuer may be: the window the second read closes,
    // and in which a flusher that reads its counts in the wrong order misses an item.)
    if (mutant::color_not_rechecked || mutant::flight_counted_read_first) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    q.count_in_flight(color);
    if (mutant::color_not_rechecked || q.color.load(std::memory_order_seq_cst) == color) {
      return color;
    }
    // A flush flipped the color meanwhile: uncount (waking a flusher that waits for this
    // color to drain) and count again in the new one.
    q.end_in_flight(color);
    notify_completion(q.wq);
  }
}

}  // namespace

// Reads the calling worker's own current_pwq: only that worker writes it, so it needs no
// lock here (others read it under the pool lock).
bool is_chained(const wq_impl& wq) noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  const worker* me = this_thread_worker();
  return me && me->current_pwq && me->current_pwq->wq == &wq;
}

bool refuses_new_work(wq_impl& wq) {
  const bool exiting = process_exiting() && !mutant::exit_runs_queued;
  const bool draining = wq.draining.load(std::memory_order_seq_cst) > 0 && !is_chained(wq);
  if (!exiting && !draining) return false;
  wq.rejected.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void report_refusal(wq_impl& wq, const work& item) {
  if (process_exiting()) return;  // at exit every queueing is refused, silently
  if (!wq.reject_reported.exchange(true)) {
    log(log_level::warning,
        fmt::format("workqueue {}: queueing {} while draining is refused", wq.name, item.name()));
  }
}

namespace {

// W: queueings by this thread that found their queue saturated, since it last yielded.
thread_local unsigned tls_saturated_queueings = 0;

// Backpressure: a queuer whose item finds every active slot taken (the queue is max_active
// items ahead of its workers: the kernel's nr_active at its limit) gives its CPU up once
// every backlog_yield_every such queueings - sched_yield(), which returns at once where
// nothing else is runnable on its CPU, so nothing waits. The queue drains no faster than its
// workers run, and a queuer that keeps adding past the limit only takes CPU time from them -
// on a per-CPU queue from the one worker that may run its items, on the CPU they share -
// while the backlog (and posted items' memory) grows. The kernel's flooding loops call
// cond_resched(); quiesce's retire waits past its callback limit (set_rcu_callback_limit).
// Measured (issue 29; docs/workqueue.md, "Backpressure"): 1M posted lambdas from two threads
// to an unbound queue 2.7x, from one thread to a per-CPU queue 2.1x, side by side with the
// build before. Counted in the queue's stats (backlog_yields).
bool queuer_yields_to_backlog() noexcept {
  if (mutant::backlog_never_yields) return false;
  if (++tls_saturated_queueings < backlog_yield_every) return false;
  tls_saturated_queueings = 0;
  return true;
}

}  // namespace

bool queue_work_owned(wq_impl& wq, int cpu, work& item, bool may_yield) {
  pwq* q = &wq.pwq_for_cpu(cpu);
  // Non-reentrancy: if the item is running on another pool, the new instance goes there
  // (kernel: __queue_work's last_pool check), so it cannot run on two workers at once.
  if (pool* last = state_of(item).last_pool.load(std::memory_order_acquire);
      last && last != q->pool && !mutant::no_cross_pool_reentrancy) {
    detail::lock_guard guard(last->lock);
    const worker* running = state_of(item).current_worker;
    if (running) {
      running->pool->lock.assert_held();  // a worker of `last`
      if (running->current == &item) {
        if (pwq* there = wq.pwq_in_pool(last)) q = there;
      }
    }
  }
  state_of(item).pwq_of = q;
  state_of(item).queued_ns = stat_ns();
  q->queued.fetch_add(1, std::memory_order_relaxed);
  trace_queue(item, wq);
  state_of(item).color = static_cast<std::uint8_t>(count_in_flush_color(*q));
  active_domain& d = *q->domain;
  if (d.fast_activation_allowed() && d.try_take_slot()) {
    // Activated at once: the queueing time is the activation time (one clock read less).
    activate(item, state_of(item).queued_ns);
    return false;
  }
  // Counted before the item is pushed (then nothing of the queue may be touched).
  const bool yield = may_yield && queuer_yields_to_backlog();
  if (yield) wq.backlog_yields.fetch_add(1, std::memory_order_relaxed);
  // No slot, or older items wait: queue behind them, then take what the limit allows (a
  // slot may have come free since; see active_domain::nr_inactive).
  // (The mutant that never looks again is preempted here, as a queuer may be: the window in
  // which the last active item ends and reads no waiter.)
  if (mutant::waiter_never_takes) std::this_thread::sleep_for(std::chrono::microseconds(50));
  work_list taken;
  {
    detail::lock_guard domain_guard(d.lock);
    state_of(item).active = false;
    d.inactive.push_back(&item);
    state_of(item).inactive_in.store(&d, std::memory_order_release);  // re-checked under d.lock
    d.count_waiting(1);
    // At exit, past the limit: an item that lands here after the exit hook's sweep (a
    // queuer that passed its refusal check before the flag, the timer's due item) is dropped
    // all the same. The Dekker pair with activate_all_inactive: the count above, then the
    // flag; the hook sets the flag, then reads the count (seq_cst) - one of the two sees it.
    const bool past_limit = process_exiting() && !mutant::exit_leaves_inactive;
    if (past_limit || !mutant::waiter_never_takes)
      take_inactive_locked(d, taken, nullptr, past_limit);
  }
  activate_taken(taken);
  return yield;
}

bool take_inactive_locked(active_domain& d, work_list& out, const pool* only_for, bool past_limit) {
  while (work* next = d.inactive.front()) {
    if (only_for && state_of(*next).pwq_of->pool != only_for) return false;
    if (past_limit) {
      d.nr_active.fetch_add(1, std::memory_order_seq_cst);
    } else if (!d.try_take_slot()) {
      break;
    }
    d.inactive.erase(next);
    state_of(*next).inactive_in.store(nullptr, std::memory_order_release);
    d.count_waiting(-1);
    out.push_back(next);
  }
  return true;
}

void activate_taken(work_list& items) {
  const std::uint64_t now = items.empty() ? 0 : stat_ns();
  while (work* next = items.pop_front())
    activate(*next, now);
}

void activate_taken_locked(pool& p, work_list& items) {
  const std::uint64_t now = items.empty() ? 0 : stat_ns();
  while (work* next = items.pop_front()) {
    mark_active(*next);
    insert_work_locked(p, *next, now);
  }
}

}  // namespace detail

using detail::state_of;
using detail::wq_access;

namespace {

void check_cpu(int cpu) {
  require_cpu_in(system_topology().cpus(), cpu, "cpu");
}

void check_delay(std::chrono::nanoseconds delay) {
  if (delay < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument(fmt::format("delay: {} ns is negative", delay.count()));
  }
}

// Takes the pending bit for a new instance: false if the item is already pending or is
// disabled (a cancel_sync is in progress), as the kernel's queue_work refuses both.
bool claim_pending(work& w) {
  auto& flags = state_of(w).flags;
  std::uint32_t f = flags.load(std::memory_order_relaxed);
  do {
    if (f & detail::work_pending) return false;
    if (detail::work_disabled(f)) return false;
  } while (!flags.compare_exchange_weak(f, f | detail::work_pending, std::memory_order_seq_cst,
                                        std::memory_order_relaxed));
  return true;
}

// A new instance of `w` on `wq`, whose pending bit the caller has just claimed.
void start_instance(detail::wq_impl& wq, work& w) {
  const std::uint64_t id = state_of(w).last_id.fetch_add(1, std::memory_order_seq_cst) + 1;
  state_of(w).pending_id.store(id, std::memory_order_release);
  wq.instances.created();
}

// Queues now or arms the timer, for an instance whose pending bit the caller owns and
// which is counted in wq.instances. If arming throws (the timer thread cannot start, no
// memory), the instance is undone before the exception leaves.
// Returns queue_work_owned's answer: whether the caller should yield to the backlog.
bool queue_or_arm(detail::wq_impl& wq, int cpu, work& w, std::chrono::nanoseconds delay) {
  if (delay == std::chrono::nanoseconds::zero()) {
    return detail::queue_work_owned(wq, cpu, w, /*may_yield=*/true);
  }
  try {
    detail::timer_arm(w, wq, cpu,
                      detail::deadline_after(now_ns(), static_cast<std::uint64_t>(delay.count())));
  } catch (...) {
    detail::release_pending(w);
    detail::end_instance(wq);
    throw;
  }
  return false;
}

// queue(), queue_on() and queue_delayed(): claim, check for refusal, queue or arm.
bool queue_new(detail::wq_impl& wq, int cpu, work& w, std::chrono::nanoseconds delay) {
  detail::refuse_in_forked_child("workqueue::queue");
  detail::ensure_exit_hook(wq);
  if (!claim_pending(w)) return false;
  if (detail::refuses_new_work(wq)) {
    detail::release_pending(w);  // undo before calling out
    detail::report_refusal(wq, w);
    return false;
  }
  start_instance(wq, w);
  if (queue_or_arm(wq, cpu, w, delay)) ::sched_yield();  // see queuer_yields_to_backlog
  return true;
}

}  // namespace

bool workqueue::queue(work& w) {
  return queue_new(*impl_, -1, w, std::chrono::nanoseconds::zero());
}

bool workqueue::queue_on(int cpu, work& w) {
  check_cpu(cpu);
  return queue_new(*impl_, cpu, w, std::chrono::nanoseconds::zero());
}

bool workqueue::queue_delayed(delayed_work& w, std::chrono::nanoseconds delay) {
  check_delay(delay);
  return queue_new(*impl_, -1, w, delay);
}

bool workqueue::queue_delayed_on(int cpu, delayed_work& w, std::chrono::nanoseconds delay) {
  check_cpu(cpu);
  check_delay(delay);
  return queue_new(*impl_, cpu, w, delay);
}

bool workqueue::mod_delayed(delayed_work& w, std::chrono::nanoseconds delay) {
  detail::refuse_in_forked_child("workqueue::mod_delayed");
  check_delay(delay);
  detail::wq_impl& wq = *impl_;
  detail::ensure_exit_hook(wq);
  // Refused (nothing changes): a cancel_sync is in progress, or the queue takes no new work
  // from this thread. True: this call created no instance.
  if (detail::work_disabled(state_of(w).flags.load(std::memory_order_seq_cst))) return true;
  if (detail::refuses_new_work(wq)) {
    detail::report_refusal(wq, w);
    return true;
  }
  // Counted first, so that the queue never looks empty while the instance moves.
  wq.instances.created();
  const bool was_pending = detail::grab_pending(w, /*count_cancel=*/false);
  // Disabled since the check above (a cancel_sync began), with the item idle: create
  // nothing (kernel: clear_pending_if_disabled). A moved instance is queued again instead:
  // that cancel_sync is waiting to take it, and it reports it as cancelled.
  if (!was_pending && !detail::mutant::mod_delayed_checks_once &&
      detail::work_disabled(state_of(w).flags.load(std::memory_order_seq_cst))) {
    detail::release_pending(w);
    detail::end_instance(wq);  // the count raised for it above
    return true;
  }
  if (!was_pending) {
    const std::uint64_t id = state_of(w).last_id.fetch_add(1, std::memory_order_seq_cst) + 1;
    state_of(w).pending_id.store(id, std::memory_order_seq_cst);
  }
  queue_or_arm(wq, -1, w, delay);
  return was_pending;
}

}  // namespace quiesce
