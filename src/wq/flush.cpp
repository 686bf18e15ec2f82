// SPDX-License-Identifier: Apache-2.0
// The end of an instance and waiting for it: instance accounting, taking a pending item
// back (cancel), work::flush, cancel_sync, workqueue::flush (flush colors) and drain.
#include <fmt/format.h>

#include <stdexcept>
#include <thread>

#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/log.hpp"

namespace quiesce {

namespace detail {

void end_instance(wq_impl& wq) noexcept {
  wq.instances.ended();  // last touch of wq
  notify_completion(&wq);
}

namespace {

// The common case of activating waiting items as an active one ends, without giving up the
// pool lock: the domain lock is free (try_lock: the order is domain -> pool, so we may not
// wait for it here) and every item it lets run goes to our own pool (activating on another
// would take that pool's lock). Otherwise false, and the caller takes the slow path.
bool activate_inactive_here(active_domain& d, pool& p) QUIESCE_REQUIRES(p.lock) {
  if (!d.lock.try_lock()) return false;
  work_list taken;
  const bool all = take_inactive_locked(d, taken, &p);
  d.lock.unlock();
  activate_taken_locked(p, taken);
  return all;
}

}  // namespace

void end_queued_instance_locked(pwq& q, int color, bool active, detail::unique_lock& pool_lk) {
  wq_impl& wq = *q.wq;
  if (active) {
    active_domain& d = *q.domain;
    // The slot back, then a look for waiting items (active_domain::nr_inactive): without a
    // lock unless one waits. The domain lock comes before the pool lock: ours is dropped.
    const int now_active = d.nr_active.fetch_sub(1, std::memory_order_seq_cst) - 1;
    // (The mutant that lets queuers skip waiting items is preempted here, as an ending item
    // may be: the window in which a slot is free and items still wait.)
    if (mutant::active_skips_inactive) std::this_thread::yield();
    // Refill first: above the refill mark the count of waiting items is not read at all.
    if (d.should_refill(now_active) && d.nr_inactive.load(std::memory_order_seq_cst) > 0 &&
        !activate_inactive_here(d, *q.pool)) {
      unlocked(pool_lk, [&d] {
        work_list taken;
        {
          detail::lock_guard domain_guard(d.lock);
          take_inactive_locked(d, taken);
        }
        activate_taken(taken);
      });
    }
  }
  q.end_in_flight(color);  // last touch of q
  end_instance(wq);
}

void release_pending(work& item) noexcept {
  state_of(item).pending_id.store(0, std::memory_order_seq_cst);
  state_of(item).flags.fetch_and(~work_pending, std::memory_order_seq_cst);
  notify_completion(&item);
}

bool grab_pending(work& item, bool count_cancel) {
  auto count = [count_cancel](wq_impl& wq) {
    if (count_cancel) wq.cancelled.fetch_add(1, std::memory_order_relaxed);
  };
  for (;;) {
    const std::uint32_t old =
        state_of(item).flags.fetch_or(work_pending, std::memory_order_seq_cst);
    if (!(old & work_pending)) return false;  // idle: the bit is ours now
    wq_impl* timer_wq = nullptr;
    int cpu = -1;
    if (timer_cancel(item, &timer_wq, &cpu)) {
      count(*timer_wq);
      end_instance(*timer_wq);
      return true;
    }
    if (pool* p = state_of(item).queued_pool.load(std::memory_order_seq_cst)) {
      detail::unique_lock guard(p->lock);
      splice_incoming_locked(*p);  // pushed items are listed from here on
      // Not listed although queued here: its queuer has not pushed it yet (in transit).
      if (state_of(item).queued_pool.load(std::memory_order_seq_cst) == p &&
          state_of(item).on_list) {
        static_cast<work_list*>(state_of(item).on_list)->erase(&item);
        state_of(item).on_list = nullptr;
        state_of(item).queued_pool.store(nullptr, std::memory_order_seq_cst);
        pwq& q = *state_of(item).pwq_of;
        q.pool->lock.assert_held();  // an item is listed only in its pwq's pool
        count(*q.wq);
        end_queued_instance_locked(q, state_of(item).color, state_of(item).active, guard);
        return true;
      }
    }
    if (active_domain* d = state_of(item).inactive_in.load(std::memory_order_seq_cst)) {
      detail::unique_lock guard(d->lock);
      if (state_of(item).inactive_in.load(std::memory_order_seq_cst) == d) {
        d->inactive.erase(&item);
        state_of(item).inactive_in.store(nullptr, std::memory_order_seq_cst);
        d->count_waiting(-1);
        pwq& q = *state_of(item).pwq_of;
        const int color = state_of(item).color;
        count(*q.wq);
        guard.unlock();  // the domain belongs to the queue: released before its last touch
        q.end_in_flight(color);
        end_instance(*q.wq);
        return true;
      }
    }
    // Pending but on no list: in transit between a queuer, the timer and a list (a few
    // instructions, none of them waits). Let the thread moving it run.
    std::this_thread::yield();
  }
}

}  // namespace detail

bool work::flush() {
  detail::refuse_in_forked_child("work::flush");
  if (current_work() == this) {
    throw std::logic_error("work::flush: " + *name_ + " would wait for itself");
  }
  // A delayed item still on its timer is queued now, as the kernel's flush_delayed_work.
  detail::wq_impl* wq = nullptr;
  int cpu = -1;
  const bool was_armed = detail::timer_cancel(*this, &wq, &cpu);
  if (was_armed) detail::queue_work_owned(*wq, cpu, *this, /*may_yield=*/false);
  const std::uint64_t target = state_.last_id.load(std::memory_order_seq_cst);
  auto done = [&] {
    if (!detail::mutant::flush_ignores_pending) {
      const std::uint64_t p = state_.pending_id.load(std::memory_order_seq_cst);
      if (p != 0 && p <= target) return false;
    }
    const std::uint64_t r = state_.running_id.load(std::memory_order_seq_cst);
    return r == 0 || r > target;
  };
  if (target == 0 || done()) return was_armed;
  detail::wait_for_completion(this, done);
  return true;
}

bool work::cancel() {
  detail::refuse_in_forked_child("work::cancel");
  // A cancel_sync in progress owns the item's fate: return at once (kernel: -ENOENT).
  if (detail::work_disabled(state_.flags.load(std::memory_order_seq_cst))) return false;
  const bool was_pending = detail::grab_pending(*this, /*count_cancel=*/true);
  detail::release_pending(*this);
  return was_pending;
}

bool work::cancel_sync() {
  detail::refuse_in_forked_child("work::cancel_sync");
  if (current_work() == this) {
    throw std::logic_error("work::cancel_sync: " + *name_ + " would wait for itself");
  }
  // Disabled while we wait: queueing it (also from its own function) is refused, so a
  // self-re-arming item cannot keep us waiting (kernel 6.10: disable_work).
  const bool disable = !detail::mutant::cancel_sync_no_disable;
  if (disable) state_.flags.fetch_add(detail::work_disable_one, std::memory_order_seq_cst);
  const bool was_pending = detail::grab_pending(*this, /*count_cancel=*/true);
  detail::release_pending(*this);
  detail::wait_for_completion(
      this, [&] { return state_.running_id.load(std::memory_order_seq_cst) == 0; });
  if (disable) state_.flags.fetch_sub(detail::work_disable_one, std::memory_order_seq_cst);
  detail::notify_completion(this);
  return was_pending;
}

void workqueue::flush() {
  detail::refuse_in_forked_child("workqueue::flush");
  if (detail::is_chained(*impl_)) {
    throw std::logic_error("workqueue::flush: " + impl_->name + " flushed from its own item");
  }
  detail::wait_scope blocking;  // waiting for the flush mutex blocks too
  detail::lock_guard guard(impl_->flush_mutex);
  // Flip every pwq's color: items queued from now on get the other color, and we wait for
  // the old one to drain (kernel: flush colors; pwq::color says why a queuer racing the flip
  // is counted in the right one). Flushers are serialised, so two colors do.
  std::vector<int> flushing;
  flushing.reserve(impl_->pwqs.size());
  for (auto& q : impl_->pwqs) {
    const int old = q->color.load(std::memory_order_seq_cst);
    flushing.push_back(old);
    q->color.store(old ^ 1, std::memory_order_seq_cst);
  }
  impl_->flushes.fetch_add(1, std::memory_order_seq_cst);
  detail::wait_for_completion(impl_, [&] {
    for (std::size_t i = 0; i < impl_->pwqs.size(); ++i) {
      if (impl_->pwqs[i]->any_in_flight(flushing[i])) return false;
    }
    return true;
  });
}

void workqueue::drain() {
  detail::refuse_in_forked_child("workqueue::drain");
  detail::wq_impl& wq = *impl_;
  if (detail::is_chained(wq)) {
    throw std::logic_error("workqueue::drain: " + wq.name + " drained from its own item");
  }
  wq.draining.fetch_add(1, std::memory_order_seq_cst);
  // Lowered however drain() ends (a throw from flush() must not leave the queue refusing
  // work for good).
  struct lower_on_exit {
    detail::wq_impl& wq;
    ~lower_on_exit() { wq.draining.fetch_sub(1, std::memory_order_seq_cst); }
  } lower{wq};
  // Empty: no instance of this queue exists - none armed, queued, in transit or running
  // (one counter, which a timer firing into the queue does not change).
  auto empty = [&wq] {
    if (detail::mutant::drain_ignores_timers) return !wq.in_flight();
    return wq.instances.zero();
  };
  for (unsigned tries = 0;;) {
    flush();
    if (empty()) break;
    if (!wq.in_flight()) {
      // Only delayed (or in-transit) instances remain: wait until one ends (landing on a
      // list does not wake us; the end of the instance does, and we flush again).
      detail::wait_for_completion(&wq, [&] { return empty() || wq.in_flight(); });
      continue;
    }
    ++tries;  // chained queueing kept the queue busy through a whole flush
    if (tries == 10 || (tries % 100 == 0 && tries <= 1000)) {
      log(log_level::warning,
          fmt::format("workqueue {}: drain() isn't complete after {} tries", wq.name, tries));
    }
  }
}

}  // namespace quiesce
