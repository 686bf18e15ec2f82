// SPDX-License-Identifier: Apache-2.0
// Grace periods: rcu_synchronize, shared between concurrent callers, spinning briefly
// before blocking; and the polling cookies.
#include <fmt/format.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "../base/cpu_relax.hpp"
#include "../base/futex.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/trace.hpp"
#include "quiesce/watchdog.hpp"

namespace quiesce::detail {

namespace {

// The writer's side of the read-side barrier: with membarrier, every thread of the process
// executes a full barrier (so readers need only compiler barriers); otherwise a fence.
// The mode is decided once, before main: readers that saw membarrier registered use
// compiler barriers only, so falling back to a fence here would be unsound - a failure of
// the registered command aborts.
void master_barrier(const rcu_state& st) noexcept {
  if (st.flavor.marked_sections && memb.membarrier.load(std::memory_order_relaxed)) {
    if (::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
      if constexpr (mutant::rcu_membarrier_fallback) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return;
      }
      die("rcu: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after it was "
          "registered: %s; readers rely on it, so no grace period can be sound",
          std::strerror(errno));
    }
    return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool any_holdout(rcu_state& st, std::uint64_t gp) noexcept {
  lock_guard guard(st.registry_lock);
  for (rcu_reader_entry* r = st.readers.front(); r; r = st.readers.next(r)) {
    if (st.flavor.holds(r->word->load(std::memory_order_acquire), gp)) {
      return true;
    }
  }
  return false;
}

// Statistics counted under gp_mutex, whose holders are their only writers: a load and a
// store (readers of stats load them without the lock), not a locked read-modify-write.
void count_locked(std::atomic<std::uint64_t>& counter) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Waits until no registered thread holds grace period `gp`: a short spin (st.spin, under
// gp_mutex), then (listed as a
// waiter, the stall detector watching) sleep until a reader leaves its section (or
// reports, or goes offline, or exits) and wakes us. Returns when the first scan found a
// holdout (the grace period's timed start, also the stall detector's), or 0 if it found
// none: a grace period that waits for no one is not timed (two TSC reads were a third of
// its cost).
std::uint64_t wait_for_readers(rcu_state& st, std::uint64_t gp, blocking_waiter& me) noexcept
    QUIESCE_REQUIRES(st.gp_mutex) {
#if defined(QUIESCE_RCU_BROKEN_FOR_TESTS)
  (void)st;
  (void)gp;
  (void)me;
  return 0;  // deliberately broken: grace periods end at once (tests/stress only)
#endif
  std::atomic<std::uint32_t>& waiting = st.flavor.waiting;
  bool slept = false;
  std::uint64_t timed_from = 0;
  for (int scans = 0;; ++scans) {
    if (!any_holdout(st, gp)) {
      if (scans > 0 && !slept) st.spin.paid_off();
      return timed_from;
    }
    if (scans == 0) {
      timed_from = std::max<std::uint64_t>(stat_ns(), 1);  // 0 means untimed
      st.gp_start_ns.store(timed_from, std::memory_order_relaxed);
    }
    if (!slept && scans < st.spin.value) {
      cpu_relax();
      continue;
    }
    if (!slept) st.spin.wasted();
    slept = true;
    me.list();
    me.hold();
    waiting.store(1, std::memory_order_seq_cst);
    master_barrier(st);  // readers that left before now are seen; later ones see `waiting`
    if (!any_holdout(st, gp)) {
      waiting.store(0, std::memory_order_relaxed);
      return timed_from;
    }
    futex_wait(waiting, 1);
  }
}

void run_grace_period(rcu_state& st, std::uint64_t n, blocking_waiter& me) noexcept
    QUIESCE_REQUIRES(st.gp_mutex) {
  // Not timed yet (wait_for_readers sets it): the stall detector skips it until then.
  st.gp_start_ns.store(0, std::memory_order_relaxed);
  // Release, then the full barrier below: a cookie taken after that barrier sees n
  // (first_grace_period_from_now), one taken before it counts this period, whose scan
  // comes after the barrier.
  st.gp_started.store(n, std::memory_order_release);
  rcu_watchdog_install();  // done at load; a no-op here
  if (trace::enabled()) {
    trace::emit({.ts_ns = now_ns(),  // the trace's clock
                 .name = trace::rcu_grace_period_start,
                 .category = "rcu",
                 .str_key = "domain",
                 .str_val = st.name,
                 .num_key = "gp",
                 .num_val = n});
  }
  master_barrier(st);  // removals before the call are ordered before the scan
  // The new counter, then a full fence before the scan (liburcu: CMM_STORE_SHARED, then
  // cmm_smp_mb()); a seq_cst store before the fence would be a second full barrier.
  st.flavor.counter.store(st.flavor.counter_for(n), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Holds the watchdog (the stall detector) if it blocks.
  const std::uint64_t timed_from = wait_for_readers(st, n, me);
  master_barrier(st);  // readers' accesses are done before anything after the call
  if (timed_from == 0) {
    count_locked(st.gp_untimed);
  } else {
    const std::uint64_t end = stat_ns();
    lock_guard guard(st.stats_lock);
    st.gp_duration_ns.record(end - timed_from);
  }
  if (trace::enabled()) {
    trace::emit({.ts_ns = now_ns(),
                 .name = trace::rcu_grace_period_end,
                 .category = "rcu",
                 .str_key = "domain",
                 .str_val = st.name,
                 .num_key = "gp",
                 .num_val = n});
  }
  // After the closing full barrier: whoever reads n (acquire) sees every reader's section
  // of this period ended.
  st.gp_completed.store(n, std::memory_order_release);
}

std::uint64_t first_grace_period_from_now(const rcu_state& st) noexcept {
  // Ordered after the caller's earlier stores (the removal), as the kernel's
  // get_state_synchronize_rcu() starts with smp_mb(): a grace period that started before
  // the removal was visible must not count. A seq_cst load alone is no such fence on x86.
  if constexpr (!mutant::rcu_cookie_no_fence) std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint64_t want = st.gp_started.load(std::memory_order_seq_cst) + 1;
#if defined(QUIESCE_RCU_EARLY_FOR_TESTS)
  // Deliberately broken (tests/stress only): a grace period in progress counts, though it
  // may have started before the removal - it ends one period early.
  if (st.gp_completed.load(std::memory_order_seq_cst) < want - 1) --want;
#endif
  return want;
}

[[maybe_unused]] void lock_or_die(mutex& m, const char* what) noexcept QUIESCE_ACQUIRE(m) {
  try {
    m.lock();
  } catch (const std::system_error& e) {
    die("rcu: cannot lock %s: %s", what, e.what());
  }
}

}  // namespace

std::uint64_t rcu_first_grace_period_from_now(const rcu_state& st) noexcept {
  return first_grace_period_from_now(st);
}

void release_gp_mutex(rcu_state& st) noexcept {
  st.gp_mutex.unlock();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (st.gp_sleepers.load(std::memory_order_seq_cst) != 0) {
    st.gp_released.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(st.gp_released);
  }
}

// Takes gp_mutex (false), or returns true, without it, once grace period `want` has ended:
// a caller that finds another's grace period in progress sleeps until gp_mutex is released,
// and returns at once if the grace period it needs has ended by then (another caller ran
// it), so callers that keep taking the mutex back cannot hold it up (the kernel's and
// liburcu's synchronize_rcu share grace periods the same way). (The analysis cannot follow
// the loop's try_lock; the caller's assert_held checks the false return.)
bool lock_unless_ended(rcu_state& st, std::uint64_t want,
                       blocking_waiter& me) noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  while (!st.gp_mutex.try_lock()) {
    me.list();  // another caller's grace period is in progress: we block on it
    if constexpr (mutant::rcu_sync_waits_for_mutex) {
      lock_or_die(st.gp_mutex, "the grace-period mutex");
      return false;
    }
    st.gp_sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = st.gp_released.load(std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool ended = st.gp_completed.load(std::memory_order_seq_cst) >= want;
    const bool taken = !ended && st.gp_mutex.try_lock();
    if (!ended && !taken) futex_wait(st.gp_released, seen);
    st.gp_sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ended) return true;
    if (taken) return false;
  }
  return false;
}

// Any grace period that starts after the call will do: one another caller runs, or the next
// one, which this caller runs.
void synchronize(rcu_state& st) noexcept {
  const std::uint64_t want = first_grace_period_from_now(st);  // any that starts from now
  rcu_voluntary_block blocking;  // a Tasks quiescent state while we block
  offline_for_wait offline(st);
  blocking_waiter me(st);  // destroyed after the mutex is released (the watchdog released)
  if (lock_unless_ended(st, want, me)) {
    st.sync_served.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  st.gp_mutex.assert_held();
  count_locked(st.sync_calls);
  if (st.gp_completed.load(std::memory_order_seq_cst) >= want) {
    count_locked(st.sync_shared);
  } else {
    run_grace_period(st, st.gp_completed.load(std::memory_order_relaxed) + 1, me);
  }
  release_gp_mutex(st);
}

}  // namespace quiesce::detail

namespace quiesce {

using detail::rcu_state;

namespace {

bool misuse_inside_reader(rcu_state& st, const char* what) noexcept {
  if (!st.flavor.marked_sections) return false;
  if (!detail::memb_in_section()) return false;
  st.misuse.fetch_add(1, std::memory_order_relaxed);
  // Formatted on the stack; the report is dropped if the log itself cannot allocate.
  char line[160];
  std::snprintf(line, sizeof(line),
                "%s: %s() called inside a read-side critical section; returning without waiting",
                st.name, what);
  try {
    log(log_level::err, line);
  } catch (...) {
  }
  return true;
}

}  // namespace

void rcu_synchronize(rcu_domain& domain) noexcept {
  rcu_state& st = detail::state_of(domain);
  if (misuse_inside_reader(st, "rcu_synchronize")) return;
  detail::synchronize(st);
}

rcu_cookie rcu_get_cookie(rcu_domain& domain) noexcept {
  return {detail::rcu_first_grace_period_from_now(detail::state_of(domain))};
}

bool rcu_poll_done(rcu_domain& domain, rcu_cookie cookie) noexcept {
  return detail::state_of(domain).gp_completed.load(std::memory_order_seq_cst) >= cookie.gp;
}

namespace detail {
bool barrier_inside_reader(rcu_state& st) noexcept {
  return misuse_inside_reader(st, "rcu_barrier");
}
}  // namespace detail

}  // namespace quiesce
