// SPDX-License-Identifier: Apache-2.0
// Workers and concurrency management: the kernel's worker_thread(), process_one_work(),
// the idle list and culling, and the scheduler hook (wq_worker_sleeping) in its user-space
// form - a voluntary block (may_block, and every wait inside quiesce) on a worker stops it
// counting as running, so its pool may start another.
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <thread>

#include "../base/blocking_hook.hpp"
#include "../base/cpu_relax.hpp"
#include "../base/deferred_wake.hpp"
#include "../base/futex.hpp"
#include "../base/signal_mask.hpp"
#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/trace.hpp"

namespace quiesce::detail {

namespace {

thread_local worker* tls_worker = nullptr;  // W

std::atomic<std::int64_t> g_idle_timeout_ns{300'000'000'000};  // A: IDLE_WORKER_TIMEOUT
std::atomic<std::uint64_t> g_idle_timeout_gen{0};              // A: bumped when the timeout changes

std::string worker_name(const pool& p, int id) {
  if (p.bound()) return fmt::format("kworker/{}:{}{}", p.cpu, id, p.nice < 0 ? "H" : "");
  return fmt::format("kworker/u{}:{}{}", p.id, id, p.nice < 0 ? "H" : "");
}

void worker_main(worker* w);

// A worker could not be created (`why`): the pool asks the watchdog's tick to try again
// (and holds the watchdog so that it ticks), and the message is kept for the watchdog to
// report once (L). Throws nothing: a message that cannot be formatted is lost, the retry is
// not.
void creation_failed_locked(pool& p, std::string_view why) noexcept QUIESCE_REQUIRES(p.lock) {
  p.creation_failed_ns = now_ns();
  if (!p.creation_retry) {
    p.creation_retry = true;
    pools_retrying.fetch_add(1, std::memory_order_seq_cst);
    watchdog_hold();
  }
  if (!p.creation_failure.empty() || p.creation_failure_reported) return;
  try {
    p.creation_failure = fmt::format("workqueue: cannot create a worker for pool {} (cpus={}): {}",
                                     p.id, p.cpus.to_string(), why);
  } catch (...) {
  }
}

// The pool no longer waits for a retry: a worker was created, or woken, or none is needed (L).
void end_creation_retry_locked(pool& p) noexcept QUIESCE_REQUIRES(p.lock) {
  if (!p.creation_retry) return;
  p.creation_retry = false;
  pools_retrying.fetch_sub(1, std::memory_order_seq_cst);
  watchdog_release();
}

// Starts a new worker in `p` (L). It begins not busy and not idle: it will look for work.
// Throws nothing: a failure (no thread, no memory, the pool's limit) is remembered for the
// watchdog to report and to retry.
bool create_worker_locked(pool& p) noexcept QUIESCE_REQUIRES(p.lock) {
  if (p.nr_workers >= max_workers_per_pool) {
    creation_failed_locked(p, "the pool has reached its limit of workers");
    return false;
  }
  // Free the workers that were culled (their threads detached themselves and no longer
  // touch their worker object once they have released the lock).
  for (auto& d : p.dying) {
    d->pool->lock.assert_held();
    if (d->stat_fd >= 0) ::close(d->stat_fd);
  }
  p.dying.clear();
  const int id = p.next_worker_id;  // taken (below) only by a worker that starts
  const int slot = p.free_slots.empty() ? p.next_slot : p.free_slots.back();
  std::unique_ptr<worker> w;
  try {
    if (p.workers.size() == p.workers.capacity()) {  // the push_back below cannot throw
      p.workers.reserve(std::max<std::size_t>(8, 2 * p.workers.size()));
    }
    w = std::make_unique<worker>(&p, id, slot, worker_name(p, id));
    w->pool->lock.assert_held();
    // Inherited by the worker (signal_mask.hpp).
    const async_signals_blocked mask(!mutant::workers_take_signals);
    w->thread = std::thread(worker_main, w.get());
  } catch (const std::exception& e) {  // std::bad_alloc, or std::system_error (EAGAIN)
    // (The mutant lets a bad_alloc go on: out of this noexcept function, std::terminate.
    // Not `throw;`: GCC's -Wterminate, an error under -Werror.)
    if (mutant::creation_bad_alloc_not_caught && dynamic_cast<const std::bad_alloc*>(&e)) {
      std::rethrow_exception(std::current_exception());
    }
    creation_failed_locked(p, e.what());
    return false;
  }
  worker* raw = w.get();
  raw->pool->lock.assert_held();
  ++p.next_worker_id;
  if (slot == p.next_slot) {
    ++p.next_slot;
  } else {
    p.free_slots.pop_back();
  }
  raw->waking = true;
  p.nr_waking.fetch_add(1, std::memory_order_seq_cst);
  p.workers.push_back(std::move(w));
  ++p.nr_workers;
  end_creation_retry_locked(p);
  return true;
}

// Wakes `w` from its idle sleep once the caller releases the pool lock (L; see
// pool::wake_words).
void wake_worker_locked(pool& p, worker& w) QUIESCE_REQUIRES(p.lock) {
  std::atomic<std::uint32_t>& word = p.wake_words[static_cast<std::size_t>(w.slot)];
  word.fetch_add(1, std::memory_order_seq_cst);
  if (!mutant::wake_not_sent) defer_wake_one(word);
}

// Takes `w` off the idle list (L).
void leave_idle_locked(pool& p, worker& w) QUIESCE_REQUIRES(p.lock) {
  w.pool->lock.assert_held();
  if (!w.idle) return;
  p.idle->erase(&w);
  w.idle = false;
  --p.nr_idle;
}

void enter_idle_locked(pool& p, worker& w) QUIESCE_REQUIRES(p.lock) {
  w.pool->lock.assert_held();
  w.idle = true;
  w.idle_since_ns = now_ns();
  p.idle->push_front(&w);  // LIFO: the most recently active worker is woken first
  ++p.nr_idle;
}

// Whether `w` should count in nr_running: a busy worker that is not inside a voluntary
// block and not found asleep, and (per-CPU pools) not CPU-intensive.
bool counts_as_running(const worker& w) QUIESCE_REQUIRES(w.pool->lock) {
  if (w.pool->bound() && w.cpu_intensive) return false;
  return w.busy && w.block_depth == 0 && !w.found_asleep;
}

// The scheduler hook: a voluntary block on a worker that runs an item (not its idle sleep).
void worker_block_enter(void* ctx) noexcept {
  worker& w = *static_cast<worker*>(ctx);
  if (!w.in_function.load(std::memory_order_relaxed)) return;
  lock_guard guard(w.pool->lock);
  ++w.block_depth;
  update_count_locked(w);
}

void worker_block_leave(void* ctx) noexcept {
  worker& w = *static_cast<worker*>(ctx);
  if (!w.in_function.load(std::memory_order_relaxed)) return;
  lock_guard guard(w.pool->lock);
  if (w.block_depth > 0) --w.block_depth;
  update_count_locked(w);
}

void setup_worker_thread(worker& w) {
  pool& p = *w.pool;
  set_this_thread_name(w.name);
  if (!pin_this_thread(p.cpus)) {
    log(log_level::warning,
        fmt::format("workqueue: cannot pin {} to CPUs {}", w.name, p.cpus.to_string()));
  }
  if (p.nice != 0) set_this_thread_nice(p.nice);  // a refusal is reported once
  tls_worker = &w;
  tls_blocking_hook = blocking_hook{&worker_block_enter, &worker_block_leave, &w};
  tls_lock_wait_flag = &w.in_lock_wait;
  const pid_t tid = this_thread_tid();
  clockid_t clock = 0;
  pthread_getcpuclockid(pthread_self(), &clock);
  const int fd = ::open(fmt::format("/proc/self/task/{}/stat", tid).c_str(), O_RDONLY | O_CLOEXEC);
  auto sched = std::make_unique<schedstat_reader>(tid);
  lock_guard guard(w.pool->lock);
  w.tid = tid;
  w.cpu_clock = clock;
  w.stat_fd = fd;
  w.sched = std::move(sched);
}

// `name`: the item's interned name (the item may have destroyed itself before throwing).
void report_exception(const wq_impl& wq, const char* name, const char* what) {
  log(log_level::err, fmt::format("workqueue {}: work {} threw: {}", wq.name, name, what));
}

// Trace events carry now_ns() (the trace's clock), read only when tracing is on.
// Takes the item's address and interned name, never the item: at the end it may be gone.
void trace_execute(const work* item, const char* name, pwq& q, bool start) {
  if (!trace::enabled()) return;
  trace::event e{.ts_ns = now_ns(),
                 .name = start ? trace::workqueue_execute_start : trace::workqueue_execute_end,
                 .category = "workqueue",
                 .str_key = "function",
                 .str_val = name,
                 .num_key = "work",
                 .num_val = reinterpret_cast<std::uintptr_t>(item),
                 .ph = start ? trace::phase::begin : trace::phase::end};
  if (start) {
    e.str2_key = "workqueue";
    e.str2_val = q.wq->trace_name;
    e.num2_key = "pool";
    e.num2_val = static_cast<std::uint64_t>(q.pool->id);
    const int cpu = ::sched_getcpu();  // where the worker runs, as the kernel's CPU column
    if (cpu >= 0) {
      e.num3_key = "cpu";
      e.num3_val = static_cast<std::uint64_t>(cpu);
    }
  }
  trace::emit(e);
}

// The user function, with the pool lock released; exceptions are caught and reported. The
// report (the user's log sink) still counts as the item's: a wait there is the item's block,
// and a sleep there is found by the sleep check.
bool run_function(worker& w, work& item, const char* name, pwq& q) {
  w.in_function.store(true, std::memory_order_relaxed);
  // (The mutant leaves the item before its report: a sink that blocks holds up the pool.)
  auto report = [&](const char* what) {
    if (mutant::sleepers_exclude_report) w.in_function.store(false, std::memory_order_relaxed);
    report_exception(*q.wq, name, what);
  };
  bool threw = false;
  try {
    wq_access::run(item);
  } catch (const std::exception& e) {
    threw = true;
    report(e.what());
  } catch (...) {
    threw = true;
    report("an exception not derived from std::exception");
  }
  w.in_function.store(false, std::memory_order_relaxed);
  return threw;
}

// When `item` starts on `w`. An item that was already active (on the pool's lists) when the
// worker's last item ended has waited for this worker since then: it starts at that end,
// and the worker reads the clock once per item, not twice, under a backlog (a clock read
// is 25-30 ns on a kvm-clock guest, about a tenth of a short item's whole cost on the
// worker: issue 29). What the worker did between the two - end the last instance, take the
// pool lock, pick this one - counts as this item's run, not its wait. Any other item (one
// that arrived later: the worker was idle, or looking) reads the clock.
std::uint64_t item_start_ns(const worker& w, const work& item) noexcept {
  if (mutant::start_reuses_stale_end) return w.last_end_ns;
  const work_state& s = state_of(item);
  const std::uint64_t ready = s.activated_late ? s.activated_ns : s.queued_ns;
  return ready != 0 && ready <= w.last_end_ns ? w.last_end_ns : stat_ns();
}

// Runs one item (kernel: process_one_work), or at exit drops it. Called and returns with the
// pool lock held.
void process_one_work(pool& p, worker& w, work& item, unique_lock& lk) QUIESCE_REQUIRES(p.lock) {
  w.pool->lock.assert_held();
  // Take the item off whichever list holds it (the worklist or our scheduled list).
  static_cast<work_list*>(state_of(item).on_list)->erase(&item);
  state_of(item).on_list = nullptr;
  state_of(item).queued_pool.store(nullptr, std::memory_order_release);
  pwq& q = *state_of(item).pwq_of;
  q.pool->lock.assert_held();  // an item is listed only in its pwq's pool
  const int color = state_of(item).color;
  const bool active = state_of(item).active;

  if (p.drops_work()) {  // the process is exiting: the instance ends without running
    ++q.dropped;
    release_pending(item);
    end_queued_instance_locked(q, color, active, lk);
    return;
  }

  const std::uint64_t start = item_start_ns(w, item);
  q.queue_to_start_ns.record(start - state_of(item).queued_ns);
  if (!mutant::progress_not_noted) p.note_progress(start);

  state_of(item).current_worker = &w;
  // Published to queuers by the release-acquire chain of the pending bit (cleared below).
  if (state_of(item).last_pool.load(std::memory_order_relaxed) != &p)
    state_of(item).last_pool.store(&p, std::memory_order_release);
  w.current = &item;
  w.current_name = item.name().c_str();
  w.current_pwq = &q;
  w.current_start_ns = start;
  ++w.current_seq;
  w.cpu_intensive = q.wq->opt.cpu_intensive;
  update_count_locked(w);
  // Unbound pools start every item at once: wake another worker for the rest.
  kick_pool_locked(p);

  // Clear the pending bit before the function runs, so a re-queue runs it once more.
  // running first, then pending: a flusher that reads pending == 0 (acquire) then sees it
  // running. No waiter needs waking for a start, so release stores do.
  auto clear_pending = [&item] {
    const std::uint64_t id = state_of(item).pending_id.load(std::memory_order_seq_cst);
    state_of(item).running_id.store(id, std::memory_order_release);
    state_of(item).pending_id.store(0, std::memory_order_release);
    state_of(item).flags.fetch_and(~work_pending, std::memory_order_seq_cst);
  };
  if (!mutant::clear_pending_after_run) clear_pending();

  const char* const name = w.current_name;
  trace_execute(&item, name, q, /*start=*/true);
  w.item_destroyed = false;
  const bool threw = unlocked(lk, [&] { return run_function(w, item, name, q); });
  const std::uint64_t end = stat_ns();
  w.last_end_ns = end;
  // The function may have destroyed the item (~work told us): from here on only its
  // address and name are used, and nothing of it is written.
  const bool destroyed = w.item_destroyed;
  w.item_destroyed = false;
  trace_execute(&item, name, q, /*start=*/false);
  if (mutant::clear_pending_after_run && !destroyed) clear_pending();

  q.run_ns.record(end - start);
  p.note_run_locked(end - start);
  ++q.executed;
  if (threw) ++q.exceptions;
  w.current = nullptr;
  w.current_name = nullptr;
  w.current_pwq = nullptr;
  w.cpu_intensive = false;
  w.block_depth = 0;
  w.found_asleep = false;
  update_count_locked(w);
  if (!destroyed) {
    state_of(item).current_worker = nullptr;
    // Last touch of the item: after this a flusher may return and the owner destroy it.
    state_of(item).running_id.store(0, std::memory_order_seq_cst);
    notify_completion(&item);  // its address only
  }
  end_queued_instance_locked(q, color, active, lk);
}

// An idle worker sleeps until kicked, or until its idle timeout (re-read when it changes)
// passes. Returns false if the worker culled itself (it must return at once).
bool sleep_idle(pool& p, worker& w, unique_lock& lk) QUIESCE_REQUIRES(p.lock) {
  w.pool->lock.assert_held();
  enter_idle_locked(p, w);
  std::atomic<std::uint32_t>& word = p.wake_words[static_cast<std::size_t>(w.slot)];
  for (;;) {
    const std::uint64_t gen = g_idle_timeout_gen.load(std::memory_order_acquire);
    const std::uint64_t deadline = deadline_after(w.idle_since_ns, idle_timeout_ns());
    bool timed_out = false;
    while (w.idle && g_idle_timeout_gen.load(std::memory_order_acquire) == gen) {
      // Read under the lock: a waker bumps the word under it after changing our state, so
      // a wake-up between the unlock and the sleep makes the sleep return at once.
      const std::uint32_t seen = word.load(std::memory_order_seq_cst);
      unlocked(lk, [&] {
        if (deadline == never_ns) {
          futex_wait(word, seen);
        } else {
          timed_out = !futex_wait_until(word, seen, deadline);
        }
      });
      if (timed_out) break;
    }
    if (!w.idle) return true;                                                 // kicked
    if (g_idle_timeout_gen.load(std::memory_order_acquire) != gen) continue;  // new timeout
    if (now_ns() < deadline) continue;                                        // spurious
    if (!p.too_many_workers()) {
      w.idle_since_ns = now_ns();  // needed after all: a new idle period begins
      continue;
    }
    // Culled: leave the pool. The thread detaches itself; its worker object is freed by the
    // next worker creation, after this thread has released the lock.
    leave_idle_locked(p, w);
    --p.nr_workers;
    p.free_slots.push_back(w.slot);  // we no longer sleep on its word
    if (auto s = w.sched->sample()) p.exited_sched += *s;
    for (auto it = p.workers.begin(); it != p.workers.end(); ++it) {
      if (it->get() == &w) {
        w.thread.detach();
        p.dying.push_back(std::move(*it));
        p.workers.erase(it);
        break;
      }
    }
    return false;
  }
}

// A worker that found no work looks at the incoming list a little longer before it sleeps
// (idle_look_budget; which pools: pool::looks_before_sleeping). Meanwhile it counts as on its way
// (nr_waking), so queuers that push do not kick (pool::queuer_must_kick); it stops counting
// at the loop's top before it reads the lists, as a woken worker does, so an item pushed
// while it looked is either seen there or kicked for. Items activated onto the worklist
// under the lock meanwhile wait at most the look's budget.
constexpr int look_pauses = 8;  // ~0.3-1 us between yields, by the CPU's pause

void look_for_work(pool& p, worker& w, unique_lock& lk) QUIESCE_REQUIRES(p.lock) {
  w.pool->lock.assert_held();  // w is a worker of p
  // (The mutant never stops counting: queuers then never kick this pool again.)
  w.waking = !mutant::look_leaves_waking;
  p.nr_waking.fetch_add(1, std::memory_order_seq_cst);
  const std::uint64_t budget = w.idle_look.ns.value;
  const std::uint64_t began = stat_ns();
  const bool found = unlocked(lk, [&p, budget, began] {
    const std::uint64_t until = began + budget;
    for (;;) {
      // A few pauses between looks (a push is seen within one), then the CPU to whatever
      // else is runnable here - perhaps the producer this worker waits for (sched_yield
      // returns at once when nothing is).
      for (int i = 0; i < look_pauses; ++i) {
        if (p.incoming.load(std::memory_order_relaxed) != nullptr) return true;
        cpu_relax();
      }
      ::sched_yield();
      if (stat_ns() >= until) return false;
    }
  });
  if (found) {
    w.idle_look.found();
  } else {
    w.idle_look.missed(began);
  }
}

// The worker's life: sleep idle until kicked, then process items while the pool wants it
// to (kernel: worker_thread).
void worker_main(worker* self) {
  worker& w = *self;
  pool& p = *w.pool;
  setup_worker_thread(w);
  unique_lock lk(p.lock);
  w.pool->lock.assert_held();
  for (;;) {
    if (w.waking) {  // we were kicked (or just created): the wake-up has arrived
      w.waking = false;
      // Before need_more_worker() reads the lists: see pool::queuer_must_kick.
      p.nr_waking.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (!p.need_more_worker() && w.scheduled.empty()) {
      if (p.looks_before_sleeping() && !w.looked && !p.has_work()) {
        w.looked = true;
        look_for_work(p, w, lk);
        continue;
      }
      w.looked = false;
      {
        rcu_voluntary_block idle_is_quiescent;  // an idle worker holds no Tasks grace period
        if (!sleep_idle(p, w, lk)) break;
      }
      if (p.looks_before_sleeping()) w.idle_look.woken(stat_ns());
      continue;
    }
    w.looked = false;

    w.busy = true;
    update_count_locked(w);
    watchdog_hold();
    do {
      if (!w.scheduled.empty()) {
        process_one_work(p, w, *w.scheduled.front(), lk);
        continue;
      }
      // Items are taken in batches: the whole incoming list, when the worklist runs dry.
      if (p.worklist.empty()) splice_incoming_locked(p);
      work* item = p.worklist.front();
      if (!item) break;
      // Non-reentrancy: an item running on another worker of this pool goes to that
      // worker, which runs it after its current execution (kernel: assign_work).
      worker* running = state_of(*item).current_worker;
      if (running && running != &w) {
        running->pool->lock.assert_held();  // a worker of this pool
        p.worklist.erase(item);
        running->scheduled.push_back(item);
        state_of(*item).on_list = &running->scheduled;
        continue;
      }
      process_one_work(p, w, *item, lk);
    } while (!w.scheduled.empty() || p.keep_working());
    w.busy = false;
    update_count_locked(w);
    watchdog_release();
  }
  tls_blocking_hook = blocking_hook{};
  tls_lock_wait_flag = nullptr;
  tls_worker = nullptr;
}

}  // namespace

// ---- pool operations -------------------------------------------------------------------

void update_count_locked(worker& w) {
  const bool should = counts_as_running(w);
  if (should == w.counted) return;
  w.counted = should;
  // Before kick_pool_locked() (and the worker loop) reads the lists: see
  // pool::queuer_must_kick.
  w.pool->nr_running.fetch_add(should ? 1 : -1, std::memory_order_seq_cst);
  if (!should) kick_pool_locked(*w.pool);
}

// One wake-up at a time: a worker already on its way will look at the worklist, and if it
// starts an item while more are waiting it kicks again (a chain, as the kernel's).
void kick_pool_locked(pool& p) {
  p.lock.assert_held();  // lockdep_assert_held(&pool->lock)
  if (!p.need_more_worker() || p.nr_waking.load(std::memory_order_seq_cst) > 0) return;
  if (worker* w = p.idle->front()) {
    w->pool->lock.assert_held();  // an idle worker of p
    leave_idle_locked(p, *w);
    w->waking = true;
    p.nr_waking.fetch_add(1, std::memory_order_seq_cst);
    wake_worker_locked(p, *w);
    return;
  }
  create_worker_locked(p);
}

std::atomic<int> pools_retrying{0};

void retry_worker_creation(const std::vector<pool*>& pools) {
  if (mutant::creation_not_retried) return;
  if (pools_retrying.load(std::memory_order_seq_cst) == 0) return;  // the common case
  for (pool* p : pools) {
    lock_guard guard(p->lock);
    if (!p->creation_retry) continue;
    // The kernel's manager waits CREATE_COOLDOWN between tries: a thread limit or memory
    // shortage is not hammered at every tick, nor the pool lock held for it.
    if (now_ns() - p->creation_failed_ns < create_cooldown_ns) continue;
    if (p->need_more_worker()) kick_pool_locked(*p);  // wakes an idle worker, or creates one
    // Settled once nothing needs a worker or one is on its way (it kicks again if more
    // wait); a creation that failed again leaves the retry for the next tick.
    if (!p->need_more_worker() || p->nr_waking.load(std::memory_order_seq_cst) > 0) {
      end_creation_retry_locked(*p);
    }
  }
}

void push_work(pool& p, work& item, std::uint64_t now) {
  const bool check_first = mutant::kick_checked_before_push;
  const bool must_kick_before = check_first && p.queuer_must_kick();
  if (check_first) std::this_thread::yield();  // (the mutant: where a preemption would be)
  // Activated at its queueing (the queuer took a slot at once) or later (it waited). A late
  // activation that read the queueing's own nanosecond counts as at once: the time it is
  // ready from (item_start_ns) is the same either way.
  const bool late = now != state_of(item).queued_ns;
  state_of(item).activated_late = late;
  if (late) state_of(item).activated_ns = now;
  // Set before the push: a canceller that finds it set takes p's lock and splices; if the
  // item is not there yet it is in transit (grab_pending waits for it to land).
  state_of(item).queued_pool.store(&p, std::memory_order_seq_cst);
  work* head = p.incoming.load(std::memory_order_relaxed);
  do {
    state_of(item).incoming_next = head;
  } while (!p.incoming.compare_exchange_weak(head, &item, std::memory_order_seq_cst,
                                             std::memory_order_relaxed));
  // The item is p's now (it may already be running): only p is touched from here on.
  // Watchdog progress: the first push after the list was taken (a worker took a batch, or
  // the pool was idle) starts the stall clock. A stuck pool takes nothing, so its incoming
  // list stays non-empty and the clock keeps its first value.
  if (!head) p.note_progress(now);
  if (check_first ? must_kick_before : p.queuer_must_kick()) {
    detail::lock_guard guard(p.lock);
    kick_pool_locked(p);
  }
}

void insert_work_locked(pool& p, work& item, std::uint64_t now) {
  splice_incoming_locked(p);  // FIFO: after what queuers pushed before it
  if (p.worklist.empty()) p.note_progress(now);
  state_of(item).activated_late = true;
  state_of(item).activated_ns = now;
  p.worklist.push_back(&item);
  state_of(item).on_list = &p.worklist;
  state_of(item).queued_pool.store(&p, std::memory_order_release);  // re-checked under lock
  kick_pool_locked(p);
}

void splice_incoming_locked(pool& p) {
  // The chain is newest first: the newest goes to the worklist's tail and each older one
  // just before the one linked last, so the worklist gets them oldest first in one pass.
  work* newer = nullptr;
  for (work* item = p.incoming.exchange(nullptr, std::memory_order_seq_cst); item;) {
    work* const older = state_of(*item).incoming_next;
    state_of(*item).incoming_next = nullptr;
    if (newer) {
      p.worklist.insert_before(newer, item);
    } else {
      p.worklist.push_back(item);
    }
    state_of(*item).on_list = &p.worklist;
    newer = item;
    item = older;
  }
}

std::size_t pending_count_locked(const pool& p) {
  std::size_t n = p.worklist.size();
  for (const work* item = p.incoming.load(std::memory_order_seq_cst); item;
       item = state_of(*item).incoming_next)
    ++n;
  return n;
}

worker* this_thread_worker() noexcept {
  return tls_worker;
}

std::uint64_t idle_timeout_ns() noexcept {
  return static_cast<std::uint64_t>(g_idle_timeout_ns.load(std::memory_order_relaxed));
}

}  // namespace quiesce::detail

// ---- public functions ------------------------------------------------------------------

namespace quiesce {

using namespace detail;

void set_worker_idle_timeout(std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("timeout: the idle worker timeout must be positive");
  }
  g_idle_timeout_ns.store(timeout.count(), std::memory_order_relaxed);
  g_idle_timeout_gen.fetch_add(1, std::memory_order_acq_rel);
  // Idle workers re-evaluate their deadline with the new timeout.
  for (pool* p : all_pools()) {
    detail::lock_guard guard(p->lock);
    for (worker* w = p->idle->front(); w; w = p->idle->next(w)) {
      w->pool->lock.assert_held();
      wake_worker_locked(*p, *w);
    }
  }
}

// The calling worker's own current item: only it writes the field (others read it under
// the pool lock), so it needs no lock here.
work* current_work() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  return tls_worker ? tls_worker->current : nullptr;
}

namespace detail {

// Only the worker's own thread reads `current` here, and only while in its item's function
// (which the pool lock does not cover): the analysis cannot see that.
bool note_running_item_destroyed(const work& w) noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
  if (!tls_worker || !tls_worker->in_function.load(std::memory_order_relaxed) ||
      tls_worker->current != &w)
    return false;
  tls_worker->item_destroyed = true;
  return true;
}

}  // namespace detail

}  // namespace quiesce
