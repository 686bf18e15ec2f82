// SPDX-License-Identifier: Apache-2.0
// Internal structures of the workqueue runtime (src/wq), and the module's one protection
// legend. Not installed.
//
// Objects (kernel names in brackets):
//   pool          [worker_pool]      per-CPU (x normal/highpri) or per unbound scope group;
//                                    process-lifetime, never destroyed (registry.cpp)
//   worker        [worker]           a thread of one pool (worker.cpp)
//   pwq           [pool_workqueue]   one workqueue's presence in one pool: flush colors,
//                                    in-flight counts, per-pool stats
//   active_domain [wq_node_nr_active] max_active accounting and the inactive list: one per
//                                    pwq for bound queues, one per NUMA node for unbound
//   timer         one thread arming delayed work for the whole process (timer.cpp)
//
// Files: registry.cpp (the pools, process exit), worker.cpp (the worker loop, concurrency
// management, may_block), queue.cpp (pending bit, disabling, non-reentrancy, max_active),
// flush.cpp (instance accounting, cancel, flush, drain), timer.cpp (delayed work),
// workqueue.cpp (a queue's pwqs, stats, system queues), work.cpp (naming, destruction),
// wq_watchdog.cpp (lockups, hogs, sleepers).
//
// Protection legend (docs/DESIGN.md; every shared field below and in class work names one):
//   L(pool)    pool::lock held            L(domain)  active_domain::lock held
//   L(timer)   the timer's lock held      L(flush)   wq_impl::flush_mutex held
//   P          written only by the thread that owns the item's pending bit (it set it and
//              has not yet put the item on a list); read by whoever takes the item off a
//              list under that list's lock, which orders the accesses
//   A          atomic; the comment says the ordering that matters
//   W          touched only by the owning worker thread
//   D          touched only by the watchdog thread (under L(pool) too, where noted)
//   I          set at construction, read-only after
//   Q          written by the queuer without a lock before it pushes the item on a pool's
//              incoming list (a release CAS); read by whoever takes the list under L(pool)
//              (an acquire exchange), which orders the accesses
// Lock order: active_domain::lock -> pool::lock -> timer lock. Never the reverse; code
// that holds a pool lock and needs a domain lock drops the pool lock first.
// The queueing path takes no lock in the common case (issue 29): a queuer counts the item's
// flush color and its active slot with atomics (pwq::color, active_domain::nr_active),
// pushes it on its pool's incoming list (pool::incoming) and takes the pool lock only when
// the pool needs a worker woken (pool::queuer_must_kick). Workers, cancellers and the
// exit path take that list whole under L(pool) (splice_incoming_locked).
// No lock of this module is held while calling out: user functions, the log sink, other
// modules (RCU, the watchdog's registration) are called with every runtime lock released.
// Where clang can express an L(x), the field carries QUIESCE_GUARDED_BY and the function
// that needs it QUIESCE_REQUIRES (checked by the clang preset, -Wthread-safety).
#pragma once

#include <sys/sysinfo.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../base/adaptive_budget.hpp"
#include "../base/cache_line.hpp"
#include "../base/list.hpp"
#include "../base/mutant.hpp"
#include "../base/mutex.hpp"
#include "../watchdog/plugin.hpp"
#include "instance_count.hpp"
#include "quiesce/cpu_set.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::detail {

// ---- deliberately broken builds (tests/mutants) ------------------------------------------
// Each mutant removes one guarantee; the test suite must fail on every one of them. Only
// the mutant builds define these macros.
namespace mutant {
// every wait and notification of completion.hpp meets on one channel (every item's end
// wakes every flusher, and is a system call while anyone flushes anything)
inline constexpr bool one_completion_channel = QUIESCE_MUTANT(ONE_COMPLETION_CHANNEL);
// work::flush waits only for a running instance
inline constexpr bool flush_ignores_pending = QUIESCE_MUTANT(FLUSH_IGNORES_PENDING);
// a running item's new instance may go elsewhere
inline constexpr bool no_cross_pool_reentrancy = QUIESCE_MUTANT(NO_CROSS_POOL_REENTRANCY);
// the pending bit is cleared after the function
inline constexpr bool clear_pending_after_run = QUIESCE_MUTANT(CLEAR_PENDING_AFTER_RUN);
// an item starts at the worker's last end even if it arrived after it (item_start_ns)
inline constexpr bool start_reuses_stale_end = QUIESCE_MUTANT(START_REUSES_STALE_END);
// a worker notes no progress as its items start (pool::note_progress): a pool that keeps
// starting items is reported as locked up
inline constexpr bool progress_not_noted = QUIESCE_MUTANT(PROGRESS_NOT_NOTED);
// drain() checks only the queued/running items
inline constexpr bool drain_ignores_timers = QUIESCE_MUTANT(DRAIN_IGNORES_TIMERS);
// queueing is not refused while cancel_sync waits
inline constexpr bool cancel_sync_no_disable = QUIESCE_MUTANT(CANCEL_SYNC_NO_DISABLE);
// quiesce's waits do not leave concurrency management
inline constexpr bool waits_keep_running = QUIESCE_MUTANT(WAITS_KEEP_RUNNING);
// mod_delayed checks disabling only before grabbing
inline constexpr bool mod_delayed_checks_once = QUIESCE_MUTANT(MOD_DELAYED_CHECKS_ONCE);
// a kick bumps the idle worker's word but sends no wake-up
inline constexpr bool wake_not_sent = QUIESCE_MUTANT(WAKE_NOT_SENT);
// at exit, queued items keep running and re-queueing
inline constexpr bool exit_runs_queued = QUIESCE_MUTANT(EXIT_RUNS_QUEUED);
// drain's zero test reads slot by slot, once
inline constexpr bool instance_count_one_pass = QUIESCE_MUTANT(INSTANCE_COUNT_ONE_PASS);
// post's free list hands out a node it keeps listed
inline constexpr bool post_node_handed_out_twice = QUIESCE_MUTANT(POST_NODE_HANDED_OUT_TWICE);
// A trim frees a slab with any free node on the depots, not only one whose every node is.
inline constexpr bool post_trim_frees_partial_slabs = QUIESCE_MUTANT(POST_TRIM_FREES_PARTIAL_SLABS);
// the automatic trim is never queued: a burst's free nodes stay until trim_posted_memory()
inline constexpr bool post_trim_never_armed = QUIESCE_MUTANT(POST_TRIM_NEVER_ARMED);
// a queuer decides whether to wake a worker before it pushes the item, not after
inline constexpr bool kick_checked_before_push = QUIESCE_MUTANT(KICK_CHECKED_BEFORE_PUSH);
// a queuer counts the item in the flush color it read, without reading the color again
inline constexpr bool color_not_rechecked = QUIESCE_MUTANT(COLOR_NOT_RECHECKED);
// a flusher reads an item count before the end count (pwq::any_in_flight)
inline constexpr bool flight_counted_read_first = QUIESCE_MUTANT(FLIGHT_COUNTED_READ_FIRST);
// a queuer takes a free active slot although older items wait inactive
inline constexpr bool active_skips_inactive = QUIESCE_MUTANT(ACTIVE_SKIPS_INACTIVE);
// a posted item the queue refused is never destroyed
inline constexpr bool post_refused_kept = QUIESCE_MUTANT(POST_REFUSED_KEPT);
// a queuer that lists its item waiting never looks for a free slot again (queue_work_owned)
inline constexpr bool waiter_never_takes = QUIESCE_MUTANT(WAITER_NEVER_TAKES);
// the watchdog never activates items left waiting with a slot free (activate_stranded)
inline constexpr bool stranded_not_swept = QUIESCE_MUTANT(STRANDED_NOT_SWEPT);
// a normal-priority pool's worker that looked for work goes on counting as on its way
inline constexpr bool look_leaves_waking = QUIESCE_MUTANT(LOOK_LEAVES_WAKING);
// the watchdog never ends an unbound pool's one-worker mode (pool::end_short_items_locked)
inline constexpr bool short_items_kept = QUIESCE_MUTANT(SHORT_ITEMS_KEPT);
// a queuer never gives its CPU up to a saturated queue's backlog (queuer_yields_to_backlog)
inline constexpr bool backlog_never_yields = QUIESCE_MUTANT(BACKLOG_NEVER_YIELDS);
// the timer thread, queueing a due item, counts toward backpressure as a queue() caller does
inline constexpr bool timer_yields_to_backlog = QUIESCE_MUTANT(TIMER_YIELDS_TO_BACKLOG);
// a worker that could not be created is never tried again (retry_worker_creation)
inline constexpr bool creation_not_retried = QUIESCE_MUTANT(CREATION_NOT_RETRIED);
// a worker creation that runs out of memory (std::bad_alloc) is not a failed creation
inline constexpr bool creation_bad_alloc_not_caught = QUIESCE_MUTANT(CREATION_BAD_ALLOC_NOT_CAUGHT);
// a worker whose item threw leaves the item before the log sink reports it (not found asleep there)
inline constexpr bool sleepers_exclude_report = QUIESCE_MUTANT(SLEEPERS_EXCLUDE_REPORT);
// a worker asleep outside its item (waiting for the pool lock) counts as asleep
inline constexpr bool sleepers_include_lock_waits = QUIESCE_MUTANT(SLEEPERS_INCLUDE_LOCK_WAITS);
// a worker waiting for a runtime lock inside its item (a cancel, a queueing) counts as asleep
inline constexpr bool sleepers_include_item_lock_waits =
    QUIESCE_MUTANT(SLEEPERS_INCLUDE_ITEM_LOCK_WAITS);
// the exit hook leaves items waiting inactive where they are (activate_all_inactive)
inline constexpr bool exit_leaves_inactive = QUIESCE_MUTANT(EXIT_LEAVES_INACTIVE);
// a queuer at exit kicks only as at any other time (pool::queuer_must_kick)
inline constexpr bool exit_push_not_kicked = QUIESCE_MUTANT(EXIT_PUSH_NOT_KICKED);
// workers are created with the process's asynchronous signals deliverable to them
inline constexpr bool workers_take_signals = QUIESCE_MUTANT(WORKERS_TAKE_SIGNALS);
}  // namespace mutant

// ---- work_state::flags ----------------------------------------------------------------------
inline constexpr std::uint32_t work_pending = 1u << 0;  // WORK_STRUCT_PENDING
// Disable count (kernel 6.10 WORK_OFFQ_DISABLE): while non-zero, queueing the item is refused
// and cancel() returns false at once. cancel_sync() holds one for the time it waits.
inline constexpr std::uint32_t work_disable_one = 1u << 8;
inline constexpr std::uint32_t work_disable_mask = ~(work_disable_one - 1);
inline bool work_disabled(std::uint32_t flags) noexcept {
  return (flags & work_disable_mask) != 0;
}

// The kernel's POOL_* flags that apply here.
inline constexpr unsigned pool_disassociated = 0x4;  // not bound to one CPU

inline constexpr int wq_dfl_active = 1024;   // WQ_DFL_ACTIVE
inline constexpr int wq_max_active = 2048;   // WQ_MAX_ACTIVE
inline constexpr int wq_dfl_min_active = 8;  // WQ_DFL_MIN_ACTIVE
inline constexpr int max_workers_per_pool = 1024;
// Backpressure (queue.cpp, queuer_yields_to_backlog): a thread yields once per this many of
// its queueings that find every active slot of their queue taken.
inline constexpr unsigned backlog_yield_every = 16;

// An unbound pool's items count as short (pool::short_items) while they run for less than
// this (the item's run: pool::note_run_locked): about a worker's wake-up on the other CPU here
// (6-30 us, machine.md), the least an item must take for a second worker to start it sooner than
// the running one.
inline constexpr std::uint64_t short_item_ns = 5'000;
// The watchdog ends a pool's one-worker mode when it finds an item that has used this much
// CPU time, between two of its ticks, while work waits (pool::end_short_items_locked).
inline constexpr std::uint64_t long_item_ns = 1'000'000;
inline bool items_are_short(std::uint64_t run_ns) noexcept {
  return run_ns < short_item_ns;
}
// A failed worker creation is tried again this long after (CREATE_COOLDOWN: HZ, one second).
inline constexpr std::uint64_t create_cooldown_ns = 1'000'000'000;

// now + delta, saturated at the largest deadline a clock's time_point can hold (callers
// treat that as "never").
inline constexpr std::uint64_t never_ns = std::numeric_limits<std::int64_t>::max();
inline std::uint64_t deadline_after(std::uint64_t now, std::uint64_t delta) noexcept {
  return delta >= never_ns - now ? never_ns : now + delta;
}

// Runs `fn` with `lk` released, and takes `lk` again afterwards (also if fn throws). The one
// unlock/call/relock sequence of the module.
// (The analysis cannot follow the release and re-acquisition; to the caller the lock stays
// held, as it is on return.)
template <typename Lock, typename Fn>
decltype(auto) unlocked(Lock& lk, Fn&& fn) QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  struct relock {
    Lock& lk;
    ~relock() { lk.lock(); }
  };
  lk.unlock();
  relock again{lk};
  return fn();
}

// Access to work's private state for the runtime (the friend of class work).
// What src/wq reaches inside class work and class workqueue (their friend).
struct wq_access {
  static work_state& state(work& w) noexcept { return w.state_; }
  static const work_state& state(const work& w) noexcept { return w.state_; }
  static void run(work& w) { w.fn_(w); }
  static wq_impl& impl(workqueue& wq) noexcept { return *wq.impl_; }
};

// Called by ~work() on a worker running that very item from its own function: the worker
// must not touch the item once the function returns. False if the calling thread is not
// running `w` (then the destructor's usual rules apply).
bool note_running_item_destroyed(const work& w) noexcept;

// The runtime state of `w` (quiesce/detail/work_state.hpp).
inline work_state& state_of(work& w) noexcept {
  return wq_access::state(w);
}
inline const work_state& state_of(const work& w) noexcept {
  return wq_access::state(w);
}
inline list_node& work_node(work& w) noexcept {
  return state_of(w).node;
}

using work_list = intrusive_list<work, &work_node>;

// max_active accounting (the kernel's 6.9+ wq_node_nr_active): one per pwq for a per-CPU
// queue, one per NUMA node for an unbound one. Taking a slot is an atomic increment below
// the limit (try_take_slot); only an item that finds none, and an ending item that finds
// items waiting, take the domain lock.
struct active_domain {
  explicit active_domain(int max)
      : max_active(max), refill_at(max - std::max(1, max / refill_fraction)) {}
  const int max_active;  // I
  // I: an ending item activates waiting ones once nr_active has fallen to this: at once
  // below 32 slots (an ordered queue: as its one item ends), else once a sixteenth of the
  // slots are free, so that under a backlog the domain lock is taken once per batch, not
  // once per item (the kernel's rule, a refill per ending item, cost 10-50% of dispatch
  // throughput here: the enders and the queuers then fight for the lock on every item).
  // Queuers that find a free slot fill it at once either way. What the batch leaves: an
  // item whose active peers all wait for it (blocked in may_block) while fewer than a
  // sixteenth of the slots are free would wait for ever - so the watchdog, at every tick
  // while anything is in flight, activates items left waiting with a slot free
  // (activate_stranded): such an item starts within a tick (4 ms by default).
  static constexpr int refill_fraction = 16;
  const int refill_at;
  // The slot count is written by every queuer and every ending item; the lock, the count of
  // waiting items and their list only under a backlog, and read by ending items only when
  // they would refill. Two lines, so that an ending item's decrement does not take the
  // line a queuer under a backlog writes per item away from it.
  // A (seq_cst): items counted active (on a pool's lists or running). Raised below
  // max_active by try_take_slot, lowered when an active instance ends.
  alignas(cache_line) std::atomic<int> nr_active{0};
  std::atomic<int> peak_active{0};  // A (relaxed): the most nr_active has been
  alignas(cache_line) mutex lock{"wq active_domain::lock"};
  // A (seq_cst): items on `inactive`. Written under L(domain); read without it by queuers
  // (a queuer that sees one waiting queues behind it) and by ending items that would
  // refill (that see one waiting activate it). The Dekker pair: a waiting item is counted
  // here before its queuer tries for a slot again, and an ending item gives its slot back
  // before it reads this count, so one of the two sees the other.
  std::atomic<int> nr_inactive{0};
  // L(domain): items waiting for nr_active < max_active, FIFO
  work_list inactive QUIESCE_GUARDED_BY(lock);

  // One active slot, if nr_active is below the limit.
  bool try_take_slot() noexcept {
    // seq_cst, as the compare-and-swap: a queuer that finds no slot here and stays inactive
    // is one side of the Dekker pair (nr_inactive), and a relaxed load that saw a stale full
    // count would let both sides miss each other where RMWs are not full fences (arm64).
    int n = nr_active.load(std::memory_order_seq_cst);
    while (n < max_active) {
      if (nr_active.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst,
                                          std::memory_order_relaxed)) {
        if (n + 1 > peak_active.load(std::memory_order_relaxed)) raise_peak(n + 1);
        return true;
      }
    }
    return false;
  }
  // Whether an item that ended, leaving `now_active` active, should activate waiting ones
  // (the caller has seen nr_inactive > 0 after giving its slot back).
  bool should_refill(int now_active) const noexcept { return now_active <= refill_at; }
  // nr_inactive up or down by one (L(domain)); keeps domains_waiting (below) in step.
  void count_waiting(int delta) noexcept;
  // Whether an item waits with a slot free (what activate_stranded looks for).
  bool stranded() const noexcept {
    return nr_inactive.load(std::memory_order_seq_cst) > 0 &&
           nr_active.load(std::memory_order_seq_cst) < max_active;
  }
  // Whether a new item may take a slot without the lock: none waits before it (so an
  // ordered queue keeps its order).
  bool fast_activation_allowed() const noexcept {
    return mutant::active_skips_inactive || nr_inactive.load(std::memory_order_seq_cst) == 0;
  }

 private:
  void raise_peak(int n) noexcept {
    int p = peak_active.load(std::memory_order_relaxed);
    while (p < n && !peak_active.compare_exchange_weak(p, n, std::memory_order_relaxed)) {
    }
  }
};

struct pwq;
struct worker;
struct wq_impl;
struct idle_list;

// A (seq_cst): set once by the exit hook (registry.cpp). Outside the registry, so asking
// does not create the pools.
extern std::atomic<bool> g_exiting;
// True once the process has begun to exit (quiesce's exit hook ran): queueing is refused.
inline bool process_exiting() noexcept {
  return g_exiting.load(std::memory_order_seq_cst);
}

struct pool {
  pool(int id_, cpu_set cpus_, int cpu_, int node_, int nice_);
  const int id;        // I
  const cpu_set cpus;  // I: where its workers run
  const int cpu;       // I: the CPU of a bound pool, -1 for unbound
  const int node;      // I
  const int nice;      // I
  bool bound() const noexcept { return cpu >= 0; }
  // How many workers may count as running at once: one on a per-CPU pool (the kernel's
  // concurrency management); on an unbound pool one per CPU of its scope group. The kernel
  // does not cap unbound pools, but there threads are cheap to switch; here extra runnable
  // workers only time-share the same CPUs (libdispatch caps its pools the same way). A
  // worker that blocks (a voluntary block, or found asleep) stops counting, so blocking
  // items never starve the pool. An unbound pool whose items are short runs them on one
  // worker (short_items, below).
  int max_running() const noexcept {
    return short_items.load(std::memory_order_seq_cst) ? 1 : running_cap;
  }
  // Whether a worker that found no work looks for more before it sleeps (idle_look_budget):
  // normal-priority pools. A per-CPU pool's worker shares its CPU with the producer it
  // would wait for, and its look gives that CPU away (sched_yield) between glances, so the
  // producer runs, queues, and the worker finds the item without a futex wake-up. A highpri
  // worker runs at nice -20: the scheduler hands the CPU straight back when it yields, so
  // its look would take the CPU from every normal thread there (and seed 004's experiment
  // measures its highpri queues' workers' time runnable, which a looker would inflate).
  bool looks_before_sleeping() const noexcept { return nice == 0; }
  unsigned flags() const noexcept { return bound() ? 0 : pool_disassociated; }
  mutex lock{"wq pool::lock"};
  // A (seq_cst): one wake-up word per worker slot. An idle worker sleeps on its slot's word
  // (futex); a waker bumps it under L(pool) and wakes the worker after releasing the lock
  // (deferred_wake.hpp), so the worker does not wake only to sleep again on the lock. The
  // words live as long as the pool (forever), so a wake-up that arrives after its worker
  // was culled, or for the slot's next worker, is only a spurious one.
  const std::unique_ptr<std::atomic<std::uint32_t>[]> wake_words {
    new std::atomic<std::uint32_t>[ max_workers_per_pool ]()
  };
  std::vector<int> free_slots QUIESCE_GUARDED_BY(lock);  // L(pool): slots of culled workers
  int next_slot QUIESCE_GUARDED_BY(lock) = 0;            // L(pool): slots never used yet
  work_list worklist QUIESCE_GUARDED_BY(lock);  // L(pool): active items waiting for a worker
  // L(pool), unbound pools only: the latest run of items shorter than short_item_ns, and of
  // items not shorter. A pool enters the one-worker mode after short_streak_to_enter short
  // items in a row and leaves it after long_streak_to_leave long ones (hysteresis: a short
  // item preempted mid-run, which looks long, does not end the mode). A new pool starts
  // outside it, waking a worker per item until it has seen short ones. Beside the worklist,
  // which the running worker writes per item too (not on watchdog_ts's line, which queuers
  // write).
  int short_streak QUIESCE_GUARDED_BY(lock) = 0;
  int long_streak QUIESCE_GUARDED_BY(lock) = 0;
  static constexpr int short_streak_to_enter = 8;
  static constexpr int long_streak_to_leave = 2;
  // A (seq_cst): active items pushed by queuers without the lock, newest first, chained
  // through work_state::incoming_next. Pushed by a CAS; taken whole (exchange) only under
  // L(pool), by splice_incoming_locked, so the chain below the head is stable while the lock
  // is held (no ABA: nothing pops a single node).
  // Alone on its line: a queuer's push must not miss on a line that the workers write per
  // item under the lock (the worklist), nor they on the one it writes per item (issue 29).
  alignas(cache_line) std::atomic<work*> incoming{nullptr};
  // L(pool): every live worker
  alignas(cache_line) std::vector<std::unique_ptr<worker>> workers QUIESCE_GUARDED_BY(lock);
  // L(pool): culled workers, to be joined
  std::vector<std::unique_ptr<worker>> dying QUIESCE_GUARDED_BY(lock);
  // L(pool): sleeping idle workers, LIFO (the list is defined after worker).
  const std::unique_ptr<idle_list> idle QUIESCE_PT_GUARDED_BY(lock);
  int nr_workers QUIESCE_GUARDED_BY(lock) = 0;  // L(pool)
  int nr_idle QUIESCE_GUARDED_BY(lock) = 0;     // L(pool)
  // Written under L(pool) (seq_cst), read without it by queuers (queuer_must_kick), on a
  // line of their own: they change as workers start and stop counting, not per item, so a
  // queuer's read hits in its cache while the workers write the lines around them.
  alignas(cache_line) std::atomic<int> nr_running{0};  // busy workers that count (above)
  std::atomic<int> nr_waking{0};                       // kicked or created, not yet looking
  // A (seq_cst), unbound pools: whether the items that ran lately were shorter than a worker's
  // wake-up (note_run_locked). Then the pool runs them on one worker at a time (max_running() is
  // 1): an item that ends before a second worker would be awake is not worth waking one for, and
  // two workers that take such items in turn pass the pool lock, the worklist and the item lines
  // between their CPUs on every item - and take CPU time from the queuer where CPUs are few (issue
  // 29: with it, unbound empty items 1.3-1.4x and posted lambdas 1.2-1.5x faster here;
  // docs/workqueue.md). Set under L(pool) as items end (note_run_locked); cleared there, and by the
  // watchdog when an item runs long while work waits behind it (end_short_items_locked: a long item
  // after short ones holds up the rest for two ticks at most). Read by queuers without the lock
  // (queuer_must_kick): a stale read delays a kick, which the running worker's next look or the
  // watchdog makes up for.
  std::atomic<bool> short_items{false};
  // I: max_running() outside that mode - 1 on a per-CPU pool, else the CPUs of its scope
  // group. A copy of what cpu and cpus say, on this line because queuers read it on every
  // push: cpu and cpus share the first line with the pool lock, which workers write per
  // item (with the one-worker mode, reading them held one-poster unbound items at 1.13x of
  // the build before instead of 1.31x).
  const int running_cap;
  alignas(cache_line) int next_worker_id QUIESCE_GUARDED_BY(lock) = 0;  // L(pool)
  // L(pool): the process is exiting: workers drop queued items instead of running them.
  bool exiting QUIESCE_GUARDED_BY(lock) = false;
  // L(pool): a worker could not be created; the watchdog reports it (unlocked) once.
  std::string creation_failure QUIESCE_GUARDED_BY(lock);
  bool creation_failure_reported QUIESCE_GUARDED_BY(lock) = false;  // L(pool)
  // L(pool): a creation failed while the pool needed a worker, and none has been created
  // or woken since: the watchdog's tick tries again (retry_worker_creation) once
  // create_cooldown_ns has passed since the last failure, and the pool holds the watchdog
  // (ticking) meanwhile. Counted in pools_retrying.
  bool creation_retry QUIESCE_GUARDED_BY(lock) = false;
  std::uint64_t creation_failed_ns QUIESCE_GUARDED_BY(lock) = 0;  // L(pool): now_ns() of the last
  sched_sample exited_sched QUIESCE_GUARDED_BY(lock);  // L(pool): schedstat of culled workers
  // A: last progress (an item started, or work arrived on an empty list), for the lockup
  // check; written through note_progress.
  std::atomic<std::uint64_t> watchdog_ts{0};
  // Progress at `now` (stat_ns). Written only once it has moved on by progress_granularity_ns,
  // so that a queuer (work arriving) and the worker (an item starting) do not take the line
  // from each other on every item (issue 29); the lockup clock then starts at most that much
  // early, against thresholds of seconds.
  static constexpr std::uint64_t progress_granularity_ns = 100'000;
  void note_progress(std::uint64_t now) noexcept {
    if (now > watchdog_ts.load(std::memory_order_relaxed) + progress_granularity_ns)
      watchdog_ts.store(now, std::memory_order_relaxed);
  }
  // D: watchdog_ts when a lockup was reported
  std::uint64_t lockup_reported_ts QUIESCE_GUARDED_BY(lock) = 0;
  // An item that ran `ns` (wall time) ended (L); keeps short_items in step.
  void note_run_locked(std::uint64_t ns) noexcept QUIESCE_REQUIRES(lock) {
    if (bound()) return;
    if (items_are_short(ns)) {
      long_streak = 0;
      short_streak = std::min(short_streak + 1, short_streak_to_enter);
    } else {
      short_streak = 0;
      long_streak = std::min(long_streak + 1, long_streak_to_leave);
    }
    const bool was = short_items.load(std::memory_order_relaxed);
    const bool now =
        was ? long_streak < long_streak_to_leave : short_streak >= short_streak_to_enter;
    if (now != was) short_items.store(now, std::memory_order_seq_cst);
  }
  // The watchdog found an item that has used long_item_ns of CPU time while work waits
  // behind it (L): the pool's items are not short after all. Returns true if that ended the
  // one-worker mode (the caller kicks).
  bool end_short_items_locked() noexcept QUIESCE_REQUIRES(lock) {
    if (!short_items.load(std::memory_order_relaxed) || mutant::short_items_kept) return false;
    short_streak = 0;
    long_streak = long_streak_to_leave;
    short_items.store(false, std::memory_order_seq_cst);
    return true;
  }

  // Items wait for a worker: on the worklist, or pushed and not yet spliced.
  bool has_work() const noexcept QUIESCE_REQUIRES(lock) {
    return !worklist.empty() || incoming.load(std::memory_order_seq_cst) != nullptr;
  }
  // The kernel's policy predicates (all L(pool)).
  // Work is waiting and fewer workers than max_running() count as running: wake (or
  // create) a worker. Per-CPU pools: nobody is running (kernel: nr_running == 0). An exiting
  // pool wants a worker for whatever lands on its list, to drop it.
  bool need_more_worker() const noexcept QUIESCE_REQUIRES(lock) {
    return has_work() && (running() < max_running() || drops_work());
  }
  // A worker that finished an item takes the next one while running workers do not
  // exceed max_running() (per-CPU pools: while it alone runs, kernel: nr_running <= 1).
  bool keep_working() const noexcept QUIESCE_REQUIRES(lock) {
    return has_work() && (running() <= max_running() || drops_work());
  }
  // need_more_worker() as a queuer sees it after its push, without the lock: fewer workers
  // count as running than may, and none is on its way. The linearization point is the push
  // (seq_cst) before these loads: a worker that stops counting, or finishes waking, lowers
  // its count before it reads has_work(), so either it sees the item or the queuer sees the
  // lowered count and kicks. A worker on its way looks at the lists after it stops
  // counting as waking, and kicks again if more wait (the chain).
  // At exit it always kicks (it may be an item activated after the exit hook, behind a
  // worker that runs on for ever): either the queuer sees the process exiting, or its push
  // came before the hook's flag (seq_cst), and the hook's own kick of this pool sees it.
  bool queuer_must_kick() const noexcept {
    return (nr_running.load(std::memory_order_seq_cst) < max_running() &&
            nr_waking.load(std::memory_order_seq_cst) == 0) ||
           (!mutant::exit_push_not_kicked && process_exiting());
  }
  int running() const noexcept { return nr_running.load(std::memory_order_seq_cst); }
  // Idle workers beyond two are culled once they are a quarter of the busy ones.
  bool too_many_workers() const noexcept QUIESCE_REQUIRES(lock) {
    const int nr_busy = nr_workers - nr_idle;
    return nr_idle > 2 && (nr_idle - 2) * 4 >= nr_busy;
  }
  // At exit, items that reach the worklist are dropped, not run.
  bool drops_work() const noexcept QUIESCE_REQUIRES(lock) {
    return exiting && !mutant::exit_runs_queued;
  }
};

// One workqueue's presence in one pool.
struct pwq {
  pwq(wq_impl* wq_, pool* pool_, active_domain* domain_) : wq(wq_), pool(pool_), domain(domain_) {}
  wq_impl* const wq;            // I
  struct pool* const pool;      // I
  active_domain* const domain;  // I
  // A (seq_cst): the flush color given to new items. flush() flips it (flushers are
  // serialised by flush_mutex); a queuer reads it, counts the item in counted[color], and
  // reads it again, starting over (after uncounting) if it changed. So an item whose queueing
  // returned before a flip is counted in the color that flip's flusher waits for: its second
  // read came before the flip, and so did its count.
  alignas(cache_line) std::atomic<int> color{0};
  // A (relaxed): items queued here, ever - a statistic, per pwq so that posters on
  // different CPUs do not share its cache line.
  std::atomic<std::uint64_t> queued{0};
  // A (seq_cst): items queued and not finished, by flush color, kept as two monotonic
  // counts on two cache lines - queuers raise `counted` (on the line above, which they
  // write anyway), ending items (and queuers that uncount) raise `ended` - so that a queuer
  // and the worker that ends an item never write the same line. Read without a lock by
  // flushers, `ended` first (any_in_flight).
  std::atomic<std::uint64_t> counted[2] = {};
  alignas(cache_line) std::atomic<std::uint64_t> ended[2] = {};
  // Whether items of `color` are in flight. `ended` is read before `counted`, as SRCU reads
  // its per-CPU unlock counts before the lock counts: each item's end follows its count, so
  // equal reads mean that at the moment between them every item counted had ended. (Read
  // the other way round, a queuer that counts and uncounts between the reads would make an
  // item still in flight look ended: mutant flight_counted_read_first.)
  bool any_in_flight(int c) const noexcept {
    if constexpr (mutant::flight_counted_read_first) {
      const std::uint64_t n = counted[c].load(std::memory_order_seq_cst);
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // the window, widened
      return ended[c].load(std::memory_order_seq_cst) != n;
    }
    const std::uint64_t e = ended[c].load(std::memory_order_seq_cst);
    return counted[c].load(std::memory_order_seq_cst) != e;
  }
  void count_in_flight(int c) noexcept { counted[c].fetch_add(1, std::memory_order_seq_cst); }
  void end_in_flight(int c) noexcept { ended[c].fetch_add(1, std::memory_order_seq_cst); }
  // L(pool):
  alignas(cache_line) histogram queue_to_start_ns QUIESCE_GUARDED_BY(pool->lock);
  histogram run_ns QUIESCE_GUARDED_BY(pool->lock);
  std::uint64_t executed QUIESCE_GUARDED_BY(pool->lock) = 0;
  std::uint64_t exceptions QUIESCE_GUARDED_BY(pool->lock) = 0;
  std::uint64_t dropped QUIESCE_GUARDED_BY(pool->lock) = 0;  // instances dropped at exit (not run)
  std::uint64_t hogs QUIESCE_GUARDED_BY(pool->lock) = 0;
};

// How long a worker that found no work looks for more before it sleeps (worker.cpp,
// look_for_work): a wake-up of a worker asleep on another CPU costs an interprocessor
// interrupt, and in a virtual machine the wake-up of an idle vCPU, several microseconds
// that a producer waiting for its item (a round trip) pays every time; on the producer's
// own CPU (a per-CPU pool) it costs a futex call each way. So it looks first, as oneTBB's
// workers do - adaptively, as the grace period's spin
// (rcu/internal.hpp): the budget doubles each time looking found work and halves each time
// it did not, within [min, max], so a pool whose work comes seldom (an idle pool) looks
// for a microsecond and sleeps. A worker woken soon after a look that missed (sooner than
// max after the look began) looks long enough next time to have caught that work: else a
// producer that sleeps while its item runs, and wakes slowly, makes every look miss, the
// budget fall to min, and every trip pay two wake-ups. Which pools look:
// pool::looks_before_sleeping.
struct idle_look_budget {
  adaptive_budget<std::uint64_t, 1'000, 50'000> ns;  // how long to look
  std::uint64_t missed_look_began_ns = 0;            // 0: the last look found work
  void found() noexcept {
    ns.paid_off();
    missed_look_began_ns = 0;
  }
  void missed(std::uint64_t began_ns) noexcept {
    ns.wasted();
    missed_look_began_ns = began_ns;
  }
  void woken(std::uint64_t now_ns) noexcept {
    if (missed_look_began_ns == 0) return;
    const std::uint64_t gap = now_ns - missed_look_began_ns;
    missed_look_began_ns = 0;
    if (gap < ns.max) ns.at_least(2 * gap);
  }
};

struct worker {
  worker(struct pool* p, int id_, int slot_, std::string name_)
      : pool(p), id(id_), slot(slot_), name(std::move(name_)) {}
  struct pool* const pool;  // I
  const int id;             // I
  const int slot;           // I: its wake-up word, pool->wake_words[slot]
  const std::string name;   // I
  std::thread thread;       // L(pool): started under the pool lock; never joined

  // L(pool):
  list_node idle_node QUIESCE_GUARDED_BY(pool->lock);  // linked in pool->idle while sleeping idle
  bool idle QUIESCE_GUARDED_BY(pool->lock) = false;    // on the idle list, not yet woken
  bool busy QUIESCE_GUARDED_BY(pool->lock) = false;    // processing items (left idle, not yet back)
  bool counted QUIESCE_GUARDED_BY(pool->lock) = false;  // included in pool->nr_running
  // voluntary blocks (may_block, quiesce's waits) entered now
  int block_depth QUIESCE_GUARDED_BY(pool->lock) = 0;
  // current item marked (by its queue's flag or the watchdog)
  bool cpu_intensive QUIESCE_GUARDED_BY(pool->lock) = false;
  // the watchdog saw it sleeping while counted
  bool found_asleep QUIESCE_GUARDED_BY(pool->lock) = false;
  bool waking QUIESCE_GUARDED_BY(pool->lock) = false;  // counted in pool->nr_waking
  // The item executing. Its function may have destroyed it (work::~work tells the worker):
  // others use only its address, and its interned name below.
  work* current QUIESCE_GUARDED_BY(pool->lock) = nullptr;
  const char* current_name QUIESCE_GUARDED_BY(pool->lock) = nullptr;  // interned: never freed
  struct pwq* current_pwq QUIESCE_GUARDED_BY(pool->lock) = nullptr;
  std::uint64_t current_start_ns QUIESCE_GUARDED_BY(pool->lock) = 0;
  // W: when its last item ended (stat_ns); the next item's start, if that item was already
  // waiting then (item_start_ns)
  std::uint64_t last_end_ns = 0;
  // executions started by this worker
  std::uint64_t current_seq QUIESCE_GUARDED_BY(pool->lock) = 0;
  // items handed to this worker (non-reentrancy)
  work_list scheduled QUIESCE_GUARDED_BY(pool->lock);
  std::uint64_t idle_since_ns QUIESCE_GUARDED_BY(pool->lock) = 0;
  pid_t tid QUIESCE_GUARDED_BY(pool->lock) = 0;
  clockid_t cpu_clock QUIESCE_GUARDED_BY(pool->lock) = 0;
  int stat_fd QUIESCE_GUARDED_BY(pool->lock) = -1;  // /proc/self/task/TID/stat, for the sleep check
  std::unique_ptr<schedstat_reader> sched QUIESCE_GUARDED_BY(pool->lock);

  // W (A: written by the worker only; read by the watchdog, under L(pool), relaxed): true
  // while the worker runs a user function (outside the pool lock) or the log sink reports
  // that it threw, so that a voluntary block knows it blocks an item and not the worker's
  // own idle sleep, and the sleep check knows a sleeping worker sleeps in its item
  // (worker_asleep_in_item).
  std::atomic<bool> in_function{false};
  // W (A, as in_function): true while the worker waits for one of the runtime's mutexes
  // (tls_lock_wait_flag, src/base/mutex.hpp) - inside its item too (a cancel, a queueing),
  // where it waits as a kernel worker spins on pool->lock: not asleep in its item.
  std::atomic<bool> in_lock_wait{false};
  // W: the item running now destroyed itself from its own function (the kernel lets a
  // work function free its work_struct): after the function the worker does not touch it.
  bool item_destroyed = false;
  // W: how long it looks for work before it sleeps (unbound pools), and whether it has
  // looked since it last found none.
  idle_look_budget idle_look;
  bool looked = false;

  // D (under L(pool)): the watchdog's CPU-hog bookkeeping (per-CPU pools), and its look for
  // an item that runs long among short ones (unbound pools: pool::end_short_items_locked).
  std::uint64_t wd_seen_seq QUIESCE_GUARDED_BY(pool->lock) = 0;
  std::uint64_t wd_cpu_baseline QUIESCE_GUARDED_BY(pool->lock) = 0;
};

// The pool's idle workers (pool::idle), complete now that worker is.
struct idle_list : intrusive_list<worker, &worker::idle_node> {};

inline pool::pool(int id_, cpu_set cpus_, int cpu_, int node_, int nice_)
    : id(id_),
      cpus(std::move(cpus_)),
      cpu(cpu_),
      node(node_),
      nice(nice_),
      idle(std::make_unique<idle_list>()),
      running_cap(cpu_ >= 0 ? 1 : static_cast<int>(cpus.size())) {}

// ---- registry.cpp: the pools, and process exit --------------------------------------------
pool& bound_pool(int cpu, bool highpri);
pool& unbound_pool(const cpu_set& cpus, int node, bool highpri);
std::vector<pool*> all_pools();
// In a fork() child of a process whose workqueues had started (registry.cpp): whether, and
// a std::logic_error naming `what` if so.
bool in_forked_child() noexcept;
void refuse_in_forked_child(const char* what);
// Called by a queue before its first queueing: makes sure quiesce's exit hook will run
// before this queue's destructor (see the header's exit rules).
void ensure_exit_hook(wq_impl& wq);
// Gives `wq` its construction serial; called as the last step of the workqueue constructor.
void number_queue(wq_impl& wq) noexcept;
// A queue destroyed after exit began: its state is kept (reachable, never freed) instead of
// waiting for its running items; workers may still touch it until the process ends.
void keep_until_exit(wq_impl* wq);
// The watchdog's tick (workqueue.cpp): activates, in every live queue, the items that wait
// inactive while their domain has a slot free (active_domain::refill_at says why any do).
// Looks at the queues only while some domain has items waiting (domains_waiting).
void activate_stranded();
// A (seq_cst): domains with nr_inactive > 0, changed as one goes from 0 to 1 or back.
extern std::atomic<int> domains_waiting;
// The exit hook: activates every item that waits inactive, slot or not, so that the
// workers of their (exiting) pools drop them (the exit rules: inactive items are dropped).
void activate_all_inactive();

// ---- worker.cpp: workers and concurrency management ---------------------------------------
void kick_pool_locked(pool& p)
    QUIESCE_REQUIRES(p.lock);  // wake or create a worker if need_more_worker()
void update_count_locked(worker& w)
    QUIESCE_REQUIRES(w.pool->lock);  // sync w.counted with its state, adjust nr_running
// Pushes an active item on its pool's incoming list without the lock (`now` is its activation
// time), then wakes a worker if queuer_must_kick(). The caller may hold a domain lock, never
// a pool lock.
void push_work(pool& p, work& item, std::uint64_t now);
// Appends an active item to the worklist, after what queuers pushed before it, and wakes a
// worker if the pool needs one (L); `now` is its activation time.
void insert_work_locked(pool& p, work& item, std::uint64_t now) QUIESCE_REQUIRES(p.lock);
// Moves the incoming list to the worklist's tail, oldest first (L).
void splice_incoming_locked(pool& p) QUIESCE_REQUIRES(p.lock);
// Items on p's lists (worklist and incoming) (L).
std::size_t pending_count_locked(const pool& p) QUIESCE_REQUIRES(p.lock);
// The watchdog's tick: in each of `pools` whose last worker creation failed while it needed
// one (pool::creation_retry), tries again - a thread limit (RLIMIT_NPROC, a cgroup's
// pids.max) or memory may have come back; the kernel's manager retries the same way
// (maybe_create_worker). Looks at the pools only while some pool retries (pools_retrying).
void retry_worker_creation(const std::vector<pool*>& pools);
// The sleep check (wq_watchdog.cpp), the scheduler hook we do not have: a counted worker
// found asleep while its pool has work stops counting, so another may start (kernel:
// wq_worker_sleeping); found running again, it counts again.
void check_worker_sleep_locked(worker& w) QUIESCE_REQUIRES(w.pool->lock);
// Whether a worker whose thread is in scheduler state `state` (read from /proc before the
// call) sleeps in its item (the function, or the log sink reporting that it threw). A worker
// asleep elsewhere waits for one of the runtime's own locks - the pool lock, which the sleep
// check itself holds, or a domain lock - as a kernel worker spins on pool->lock and never
// counts as sleeping there; and so does one waiting for such a lock inside its function (an
// item that cancels another while the pool lock is held: worker::in_lock_wait).
bool worker_asleep_in_item(const worker& w, char state) noexcept;
// A (seq_cst): pools with creation_retry set, changed as each is set or cleared.
extern std::atomic<int> pools_retrying;
worker* this_thread_worker() noexcept;  // the calling worker, or nullptr
std::uint64_t idle_timeout_ns() noexcept;

// The state of one workqueue (workqueue.cpp).
struct wq_impl {
  wq_impl(std::string name_, const wq_options& opt_);
  const std::string name;    // I
  const wq_options opt;      // I (normalised: ordered implies unbound, max_active 1)
  const int max_active;      // I: the effective limit
  const char* trace_name;    // I
  bool system = false;       // I: a system queue, never destroyed
  std::uint64_t serial = 0;  // I: order of construction (registry.cpp, exit hook)
  std::vector<std::unique_ptr<active_domain>> domains;  // I
  std::vector<std::unique_ptr<pwq>> pwqs;               // I
  std::vector<int> pwq_index_of_cpu;                    // I: cpu number -> pwqs index, -1
  mutex flush_mutex{"wq flush_mutex"};                  // serialises flush() callers
  std::atomic<int> draining{0};                         // A: drain() calls in progress
  // Instances of this queue that exist: armed on the timer, queued (active or inactive), in
  // transit between those, or running. Created before an instance exists, ended as the last
  // touch of the queue when it goes; a timer firing or mod_delayed moving an instance leaves
  // it unchanged. drain() is done when it reads zero. Per CPU (instance_count.hpp): every
  // queueing and every completion writes it, and no CPU writes another's line.
  instance_count instances{static_cast<std::size_t>(::get_nprocs_conf())};
  std::atomic<bool> exit_hook_checked{false};    // A: ensure_exit_hook() ran
  std::atomic<std::uint64_t> cancelled{0};       // A
  std::atomic<std::uint64_t> rejected{0};        // A
  std::atomic<std::uint64_t> flushes{0};         // A: flushes that flipped their colors
  std::atomic<std::uint64_t> backlog_yields{0};  // A: queuer_yields_to_backlog() said yes
  std::atomic<bool> reject_reported{false};      // A

  pwq& pwq_for_cpu(int cpu);
  pwq* pwq_in_pool(const pool* p) noexcept;
  bool in_flight() const noexcept;  // any item queued or running (timers not included)
};

// ---- queue.cpp: queueing ------------------------------------------------------------------
// Whether the calling thread runs one of wq's own items (chained queueing while draining).
bool is_chained(const wq_impl& wq) noexcept;
// Whether wq refuses new work from the calling thread now: the process is exiting, or the
// queue is draining and the caller is not one of its items. Counts the refusal; the caller
// undoes what it changed, then calls report_refusal() (a call-out to the log).
bool refuses_new_work(wq_impl& wq);
void report_refusal(wq_impl& wq, const work& item);
// Queues an item whose pending bit the caller owns, whose pending_id is set and which is
// counted in wq.instances, on the pool for `cpu` (-1: the calling thread's CPU). Never
// refuses: callers check refuses_new_work() first. With `may_yield` (a caller of queue(),
// not the timer thread), returns true if the caller should now give its CPU up to the
// queue's backlog (queuer_yields_to_backlog, counted in wq.backlog_yields): it then yields,
// touching nothing of the queue.
bool queue_work_owned(wq_impl& wq, int cpu, work& item, bool may_yield);
// Takes active slots for the items waiting in `d`, oldest first, while slots are free, and
// moves those items to `out`; the caller activates them with activate_taken() once it has
// released d.lock (an activated item may run and end its queue's last instance at once, so
// nothing of the queue may be touched after it is pushed). In transit meanwhile: a
// canceller waits for them to land. With one slot (an ordered queue) the slot is taken before
// the item leaves the count of waiting ones, so a later queuer cannot run before it.
// With `only_for` set, stops at the first item for another pool and returns false (true
// otherwise). With `past_limit` (the exit hook), takes every waiting item, counting each
// active although no slot is free: they are dropped, and each gives its count back.
bool take_inactive_locked(active_domain& d, work_list& out, const pool* only_for = nullptr,
                          bool past_limit = false) QUIESCE_REQUIRES(d.lock);
void activate_taken(work_list& items);
// The same for items of `p` whose lock the caller holds: listed directly (after what was
// pushed before them).
void activate_taken_locked(pool& p, work_list& items) QUIESCE_REQUIRES(p.lock);

// ---- flush.cpp: the end of an instance, and waiting for it --------------------------------
// An instance of wq ended (ran, was cancelled, dropped or refused): the last touch of wq.
void end_instance(wq_impl& wq) noexcept;
// An instance that was counted in q (counted[color], and nr_active if active) ended.
// `pool_lk` holds q.pool->lock on entry and on return (dropped meanwhile if q's domain has
// its own lock). The last touch of q and of its queue.
void end_queued_instance_locked(pwq& q, int color, bool active, unique_lock& pool_lk)
    QUIESCE_REQUIRES(q.pool->lock);
// Clears the pending bit of an instance that is not going to run (refused, cancelled,
// dropped), then wakes waiters.
void release_pending(work& item) noexcept;
// Takes the pending bit of `item` (kernel: try_to_grab_pending). If an instance was pending
// it is removed from its timer, worklist or inactive list, its accounting is undone (it is
// counted cancelled if `count_cancel`) and grab_pending returns true. Either way the caller
// owns the pending bit afterwards.
bool grab_pending(work& item, bool count_cancel);

// ---- timer.cpp: delayed work --------------------------------------------------------------
void timer_arm(work& item, wq_impl& wq, int cpu, std::uint64_t deadline_ns);
// Disarms `item` if its timer is armed: true, with the queue and CPU it was armed for.
bool timer_cancel(work& item, wq_impl** wq, int* cpu);
// At exit: disarms every armed item and ends its instance.
void timer_drop_all();

// ---- wq_watchdog.cpp ----------------------------------------------------------------------
// The watchdog's checks of every pool: lockup, CPU hogs, sleeping workers. `now` is
// stat_ns(), the clock of every timestamp on the queueing and execution paths.
void wq_watchdog_check(const std::vector<pool*>& pools, std::uint64_t now,
                       const watchdog_config& config);

}  // namespace quiesce::detail
