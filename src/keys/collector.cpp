// SPDX-License-Identifier: Apache-2.0
// The key garbage collector (kernel: security/keys/gc.c, with the v9 chunking patch):
// one work item that runs a pass in executions bounded by the mode's budget.
#include <algorithm>
#include <mutex>

#include "internal.hpp"
#include "quiesce/clock.hpp"

namespace quiesce::keys::detail {

namespace {

void queue_gc(store_state& st) {
  if (st.opt.cpu >= 0) {
    st.wq->queue_on(st.opt.cpu, *st.gc_work);
  } else {
    st.wq->queue(*st.gc_work);
  }
}

// The budget of one step (scan or destroy) of one execution.
budget step_budget(store_state& st) {
  switch (st.opt.mode) {
    case gc_mode::monolithic:
      return budget::unlimited();
    case gc_mode::chunked:
      return budget::items(st.opt.chunk);
    case gc_mode::budget:
      return st.sizer->next();
  }
  return budget::unlimited();
}

// Whether a link to `k` should be dropped by a links pass at time `limit`: the key is dead,
// invalidated, or expired/revoked at least gc_delay ago (kernel: keyring_gc's test).
bool link_is_garbage(const store_state& st, const key& k, std::int64_t limit) {
  const std::uint32_t f = k.flags.load(std::memory_order_acquire);
  if (f & (flag_dead | flag_invalidated)) return true;
  const std::int64_t e = k.expiry.load(std::memory_order_acquire);
  return e != never && e + st.opt.gc_delay.count() <= limit;
}

// Drops the garbage links of one keyring (kernel: keyring_gc). L: serial_lock held.
void keyring_gc(store_state& st, key& keyring, std::int64_t limit) {
  quiesce::detail::lock_guard guard(keyring.keyring_lock);
  link_set* cur = keyring.links.load(std::memory_order_acquire);
  if (!cur) return;
  std::vector<key*> keep, drop;
  for (key* k : cur->keys)
    (link_is_garbage(st, *k, limit) ? drop : keep).push_back(k);
  if (drop.empty()) return;
  st.links_dropped.fetch_add(drop.size(), std::memory_order_relaxed);
  publish_links(st, keyring, std::move(keep), std::move(drop));
}

void begin_pass(store_state& st) {
  st.in_pass = true;
  st.limit = st.now();
  st.new_timer = never;
  // Advance the dead-type cycle: DEAD_1 -> DEAD_2 -> DEAD_3 (kernel: gc_state <<= 1).
  st.state &= st_dead_1 | st_dead_2;
  st.state <<= 1;
  const std::uint32_t flags =
      st.gc_flags.fetch_and(~(gc_key_expired | gc_reap_requested), std::memory_order_acq_rel);
  if (flags & gc_key_expired) st.state |= st_reaping_links;
  if (st.gc_flags.fetch_and(~gc_reap_keytype) & gc_reap_keytype) st.state |= st_dead_1;
  quiesce::detail::lock_guard guard(st.serial_lock);
  st.cursor = st.tree.begin();
}

// Scans keys from the cursor while the budget lasts; true when the tree is done.
bool scan(store_state& st, budget& b, gc_execution& ex) {
  quiesce::detail::lock_guard guard(st.serial_lock);
  key_type_rec* dead_type = st.reaping_type;
  while (st.cursor != st.tree.end()) {
    if (!b.spend()) return false;
    ++ex.scanned;
    if (st.opt.mode == gc_mode::monolithic) cond_resched();  // yields; reports nothing
    const auto it = st.cursor++;  // only the collector erases: the cursor stays valid
    key& k = *it->second;
    if (k.usage.load(std::memory_order_acquire) == 0) {
      st.graveyard.push_back(std::move(it->second));
      st.tree.erase(it);
      continue;
    }
    if ((st.state & st_dead_1) && k.type == dead_type) {
      k.flags.fetch_or(flag_dead, std::memory_order_acq_rel);
    }
    const std::int64_t e = k.expiry.load(std::memory_order_acquire);
    if (e != never) {
      const std::int64_t reap_at = e + st.opt.gc_delay.count();
      if (reap_at > st.limit) st.new_timer = std::min(st.new_timer, reap_at);
    }
    if (k.keyring && (st.state & (st_reaping_links | st_dead_2))) keyring_gc(st, k, st.limit);
    if ((st.state & st_dead_3) && k.type == dead_type) {
      if (dead_type->destroy) dead_type->destroy(k.payload);
      k.payload.clear();
      k.type = &st.dead_type;
    }
  }
  return true;
}

void destroy_key(store_state& st, std::unique_ptr<key> k) {
  key_type_rec* type;
  {
    quiesce::detail::lock_guard guard(st.serial_lock);
    type = k->type;
  }
  // A dead type's keys are still destroyed by it until its third pass retypes the rest to
  // ".dead" (which destroys nothing), as the kernel calls ->destroy before the type's
  // unregistration returns.
  if (type->destroy) type->destroy(k->payload);
  if (k->keyring) {
    // No reader can reach this keyring any more (its last link went a grace period ago):
    // its link set goes now, dropping the references it held.
    if (link_set* set = k->links.exchange(nullptr)) {
      std::unique_ptr<link_set> owned(set);
      for (key* linked : owned->keys)
        key_put(st, *linked);
    }
  }
  st.destroyed.fetch_add(1, std::memory_order_relaxed);
}

// Destroys graveyard keys while the budget lasts; true when the graveyard is empty.
bool destroy(store_state& st, budget& b, gc_execution& ex) {
  while (st.destroyed_in_graveyard < st.graveyard.size()) {
    if (!b.spend()) return false;
    destroy_key(st, std::move(st.graveyard[st.destroyed_in_graveyard++]));
    ++ex.destroyed;
  }
  st.graveyard.clear();
  st.destroyed_in_graveyard = 0;
  return true;
}

// One step of the collector: true if it must run again (chunk spent, or another pass due).
bool collect(store_state& st, gc_execution& ex) {
  if (!st.in_pass) begin_pass(st);
  if (!(st.state & st_destroying)) {
    budget b = step_budget(st);
    if (!scan(st, b, ex)) return true;  // resume the scan next time
    if (st.new_timer != never) arm_gc_timer(st, st.new_timer);
    if ((st.state & st_dead_2) || !st.graveyard.empty()) {
      // Readers of the keyrings that linked these keys are gone after this.
      may_block blocking;
      rcu_synchronize();
      st.grace_periods.fetch_add(1, std::memory_order_relaxed);
      ex.synchronized = true;
    }
    st.state |= st_destroying;  // a continuation resumes here, without a second grace period
  }
  budget b = step_budget(st);
  if (!destroy(st, b, ex)) return true;
  st.state &= ~st_destroying;

  // Dead-type bookkeeping: after the third pass the type is gone; wake the unregisterer.
  if (st.state & st_dead_3) {
    {
      quiesce::detail::lock_guard guard(st.serial_lock);
      st.reaping_type = nullptr;
    }
    {
      quiesce::detail::lock_guard lk(st.reap_lock);
      st.gc_flags.fetch_and(~gc_reaping_keytype);
    }
    st.reap_done.notify_all();
  }
  const bool again = (st.state & (st_dead_1 | st_dead_2)) != 0;
  st.state &= ~(st_reaping_links | st_reap_again);
  st.in_pass = false;
  st.passes.fetch_add(1, std::memory_order_relaxed);
  ex.pass_ended = true;
  // Full-pass requests that arrived during this pass were kept: honour them now.
  return again || (st.gc_flags.load(std::memory_order_acquire) &
                   (gc_reap_requested | gc_key_expired | gc_reap_keytype));
}

}  // namespace

void schedule_gc(store_state& st, bool expired) noexcept {
  st.gc_flags.fetch_or(gc_reap_requested | (expired ? gc_key_expired : 0u),
                       std::memory_order_acq_rel);
  if (st.gc_work) queue_gc(st);
}

void gc_execute(store_state& st) {
  gc_execution ex;
  ex.start_ns = now_ns();
  const bool more = collect(st, ex);
  ex.duration_ns = now_ns() - ex.start_ns;
  st.executions.fetch_add(1, std::memory_order_relaxed);
  if (st.sizer && ex.scanned + ex.destroyed > 0) {
    st.sizer->record(ex.scanned + ex.destroyed,
                     std::chrono::nanoseconds(ex.duration_ns - (ex.synchronized ? 0 : 0)));
  }
  if (st.opt.on_execution) st.opt.on_execution(ex);
  if (more) queue_gc(st);  // chained: re-queued behind what waits on the pool
}

void arm_gc_timer(store_state& st, std::int64_t at) {
  // One timer for the earliest deadline (kernel: key_schedule_gc).
  std::int64_t cur = st.timer_at.load(std::memory_order_acquire);
  while (at < cur) {
    if (st.timer_at.compare_exchange_weak(cur, at, std::memory_order_acq_rel)) {
      const std::int64_t delay = std::max<std::int64_t>(0, at - st.now());
      st.wq->mod_delayed(*st.gc_timer, std::chrono::nanoseconds(delay));
      return;
    }
  }
}

}  // namespace quiesce::keys::detail
