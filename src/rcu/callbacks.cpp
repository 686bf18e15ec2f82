// SPDX-License-Identifier: Apache-2.0
// Callbacks: rcu_retire / rcu_call / retire queue on the domain's callback thread, which
// takes everything queued, waits one grace period for the batch, then runs it in order;
// the thread's start (at load) and its part in fork (a pause point between callbacks).
#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>

#include "../base/futex.hpp"
#include "../base/signal_mask.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::detail {

bool barrier_inside_reader(rcu_state& st) noexcept;
void barrier_from_callback(rcu_state& st);

namespace {

constexpr std::uint64_t coalesce_ns = 1'000'000;  // a rate limit, not a synchronisation

// set_rcu_callback_limit(): per domain, callbacks queued and not yet run past which a
// thread that may wait does (the kernel's qhimark idea).
std::atomic<std::size_t> g_callback_limit{std::size_t{1} << 20};  // A

// A node that signals a waiter when the callback thread reaches it (rcu_barrier).
struct barrier_node final : rcu_head {
  barrier_node() { _Qrcu_func = &signal; }
  static void signal(rcu_head* h) {
    auto* self = static_cast<barrier_node*>(h);
    self->done.store(1, std::memory_order_release);
    futex_wake_all(self->done);
  }
  std::atomic<std::uint32_t> done{0};
};

// W: on a callback thread: its domain; the rest of the batch it is running (for an
// rcu_barrier() called from one of the batch's callbacks); how deep such barriers are
// nested; and the barrier nodes they met, which signal only once the callback that called
// the barrier has returned (every callback queued before them has then finished).
thread_local rcu_state* tls_callback_domain = nullptr;
thread_local rcu_head** tls_batch_rest = nullptr;
thread_local int tls_barrier_depth = 0;
thread_local rcu_head* tls_deferred_first = nullptr;
thread_local rcu_head** tls_deferred_tail = &tls_deferred_first;

void invoke(rcu_state& st, rcu_head* h) {
  try {
    h->_Qrcu_func(h);
  } catch (const std::exception& e) {
    st.callbacks.exceptions.fetch_add(1, std::memory_order_relaxed);
    log(log_level::err, fmt::format("{}: an RCU callback threw: {}", st.name, e.what()));
  } catch (...) {
    st.callbacks.exceptions.fetch_add(1, std::memory_order_relaxed);
    log(log_level::err, fmt::format("{}: an RCU callback threw", st.name));
  }
}

// Runs `h`, unless it is a barrier node met inside a callback's rcu_barrier(): that one waits
// (in order) until the callback returns.
void invoke_or_defer(rcu_state& st, rcu_head* h) {
  if (tls_barrier_depth > 0 && h->_Qrcu_func == &barrier_node::signal) {
    h->_Qrcu_next = nullptr;
    *tls_deferred_tail = h;
    tls_deferred_tail = &h->_Qrcu_next;
    return;
  }
  invoke(st, h);
}

void signal_deferred_barriers() {
  rcu_head* h = tls_deferred_first;
  tls_deferred_first = nullptr;
  tls_deferred_tail = &tls_deferred_first;
  while (h) {
    rcu_head* const next = h->_Qrcu_next;  // read first: the waiter may return and free it
    h->_Qrcu_func(h);
    h = next;
  }
}

// Before each top-level callback: if a fork is being prepared, stop here (never inside a
// callback) until the parent lets us go on, with `rest` (this callback and those after it)
// in `in_hand` for the child. `busy` is set while the thread is not at such a point.
void pause_point(rcu_callbacks& cb, rcu_head* rest) noexcept {
  while (cb.pause.load(std::memory_order_seq_cst) != 0) {
    cb.in_hand.store(rest, std::memory_order_release);
    cb.busy.store(0, std::memory_order_seq_cst);
    futex_wake_all(cb.busy);
    while (cb.pause.load(std::memory_order_seq_cst) != 0)
      futex_wait(cb.pause, 1);
    cb.busy.store(1, std::memory_order_seq_cst);
  }
}

void leave_busy(rcu_callbacks& cb) noexcept {
  cb.busy.store(0, std::memory_order_seq_cst);
  if (cb.pause.load(std::memory_order_seq_cst) != 0) futex_wake_all(cb.busy);
}

// Reverses a list (a stack, newest first, into queueing order, or back); counts it.
rcu_head* reversed(rcu_head* list, std::uint64_t& count) noexcept {
  rcu_head* out = nullptr;
  while (list) {
    rcu_head* next = list->_Qrcu_next;
    list->_Qrcu_next = out;
    out = list;
    list = next;
    ++count;
  }
  return out;
}

// The callback thread gives its CPU up this often while it runs a batch (sched_yield, which
// returns at once when nothing else is runnable there), as the kernel's rcu_do_batch calls
// cond_resched_tasks_rcu_qs() between callbacks in its kthreads. Without it a batch held
// its CPU for a whole scheduler slice (about 1 ms here) while a per-CPU worker waited
// behind it: a chunked key-collector execution of 30 us of CPU took 1 ms.
constexpr std::uint64_t batch_yield_interval_ns = 100'000;
// The clock is read once per this many callbacks (a read per callback cost as much as a
// small callback).
constexpr unsigned batch_clock_every = 16;

// Runs `fifo` (queueing order, `count` callbacks) after one grace period. `top`: called by
// the thread's loop (not by a barrier inside a callback), which published it in `in_hand`.
void run_batch(rcu_state& st, rcu_head* fifo, std::uint64_t count, bool top) {
  rcu_callbacks& cb = st.callbacks;
  synchronize(st);  // one grace period for the whole batch
  // Counted before they run, so a barrier's waiter (woken by its own node) sees them.
  cb.invoked.fetch_add(count, std::memory_order_relaxed);
  cb.batches.fetch_add(1, std::memory_order_relaxed);
  rcu_head** const outer = tls_batch_rest;
  tls_batch_rest = &fifo;  // a nested rcu_barrier() runs the rest of the batch
  if (top) cb.busy.store(1, std::memory_order_seq_cst);
  std::uint64_t yielded_at = stat_ns();
  unsigned until_clock = batch_clock_every;
  while (fifo) {
    if (top) pause_point(cb, fifo);
    rcu_head* const h = fifo;
    fifo = h->_Qrcu_next;  // advanced first: the callback may free its node
    invoke_or_defer(st, h);
    if (tls_barrier_depth == 0) signal_deferred_barriers();  // a top-level callback returned
    if (fifo != nullptr && --until_clock == 0) {
      until_clock = batch_clock_every;
      if (stat_ns() - yielded_at >= batch_yield_interval_ns) {
        ::sched_yield();
        yielded_at = stat_ns();
      }
    }
  }
  tls_batch_rest = outer;
  if (top) {
    cb.in_hand.store(nullptr, std::memory_order_release);
    leave_busy(cb);
  }
  // Every callback of the batch has returned (a nested barrier ran the rest): count them,
  // then let threads waiting for the backlog look again.
  cb.finished.fetch_add(count, std::memory_order_seq_cst);
  if (cb.backlog_waiters.load(std::memory_order_seq_cst) != 0) {
    cb.drained.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(cb.drained);
  }
}

void* callback_thread(void* arg) {
  rcu_state& st = *static_cast<rcu_state*>(arg);
  {
    char name[thread_name_len] = {};
    std::snprintf(name, sizeof(name), "%s_cb", st.name);
    set_this_thread_name(name);
  }
  tls_callback_domain = &st;
  rcu_callbacks& cb = st.callbacks;
  std::uint64_t last_batch_ns = 0;
  for (;;) {
    if (cb.head.load(std::memory_order_relaxed) != nullptr) {
      // Coalescing: at most one batch per millisecond while callbacks stream in, so a
      // stream of retires pays for few grace periods and frees memory in bulk (liburcu's
      // call_rcu thread waits 10 ms; batches of a few callbacks made malloc the bottleneck:
      // 4.1 -> 6.0 M retires/s). A callback after a quiet spell starts its batch at once.
      // Threads waiting for a backlog to drain: no coalescing, batches back to back.
      const std::uint64_t since = now_ns() - last_batch_ns;
      if (since < coalesce_ns && cb.backlog_waiters.load(std::memory_order_seq_cst) == 0) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(coalesce_ns - since));
      }
      last_batch_ns = now_ns();
      // Taken and published together, never while a fork is being prepared: a fork child
      // finds the batch in `in_hand`.
      cb.busy.store(1, std::memory_order_seq_cst);
      pause_point(cb, nullptr);
      std::uint64_t count = 0;
      rcu_head* const fifo = reversed(cb.head.exchange(nullptr, std::memory_order_acquire), count);
      cb.in_hand.store(fifo, std::memory_order_release);
      leave_busy(cb);
      run_batch(st, fifo, count, /*top=*/true);
      continue;
    }
    // Sleep until a callback is queued (Dekker with rcu_enqueue on sleeping/head).
    const std::uint32_t seen = cb.wake.load(std::memory_order_seq_cst);
    cb.sleeps.fetch_add(1, std::memory_order_relaxed);
    cb.sleeping.store(true, std::memory_order_seq_cst);
    if (cb.head.load(std::memory_order_seq_cst) == nullptr) {
      futex_wait(cb.wake, seen);
    }
    cb.sleeping.store(false, std::memory_order_seq_cst);
  }
}

}  // namespace

bool on_callback_thread_of(const rcu_state& st) noexcept {
  return tls_callback_domain == &st;
}

int start_callback_thread(rcu_state& st) noexcept {
  rcu_callbacks& cb = st.callbacks;
  if (cb.started.load(std::memory_order_acquire)) return 0;
  lock_guard guard(cb.start_lock);
  if (cb.started.load(std::memory_order_relaxed)) return 0;
  pthread_attr_t attr;
  if (const int err = ::pthread_attr_init(&attr); err != 0) return err;
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);  // runs for the process
  pthread_t thread;
  const async_signals_blocked mask;  // inherited by the thread (signal_mask.hpp)
  const int err = ::pthread_create(&thread, &attr, &callback_thread, &st);
  ::pthread_attr_destroy(&attr);
  if (err != 0) return err;
  cb.started.store(true, std::memory_order_release);
  return 0;
}

void pause_callbacks_for_fork(rcu_state& st) noexcept {
  rcu_callbacks& cb = st.callbacks;
  cb.pause.store(1, std::memory_order_seq_cst);
  if (on_callback_thread_of(st)) return;  // a callback forks: this is the thread
  while (cb.busy.load(std::memory_order_seq_cst) != 0)
    futex_wait(cb.busy, 1);
}

void resume_callbacks_after_fork(rcu_state& st) noexcept {
  rcu_callbacks& cb = st.callbacks;
  cb.pause.store(0, std::memory_order_seq_cst);
  futex_wake_all(cb.pause);
}

void restart_callbacks_in_child(rcu_state& st) noexcept {
  rcu_callbacks& cb = st.callbacks;
  cb.pause.store(0, std::memory_order_relaxed);
  cb.busy.store(0, std::memory_order_relaxed);
  cb.sleeping.store(false, std::memory_order_relaxed);
  if (!cb.started.load(std::memory_order_relaxed) || on_callback_thread_of(st)) {
    // Never started; or a callback forked, and its thread goes on being the callback
    // thread in the child.
    return;
  }
  // The parent's thread is not in the child. The batch it held and had not run goes back
  // to the queue, behind (older than) what was queued since: after a grace period of the
  // child, a new thread runs it. A callback it had started ran in the parent.
  std::uint64_t n = 0;
  rcu_head* const older = reversed(cb.in_hand.exchange(nullptr, std::memory_order_relaxed), n);
  rcu_head* stack = cb.head.load(std::memory_order_relaxed);
  if (!stack) {
    stack = older;
  } else {
    rcu_head* last = stack;
    while (last->_Qrcu_next)
      last = last->_Qrcu_next;
    last->_Qrcu_next = older;
  }
  cb.head.store(stack, std::memory_order_relaxed);
  cb.started.store(false, std::memory_order_relaxed);
  (void)start_callback_thread(st);  // if it fails, the first callback or barrier aborts
}

// Every domain's callback thread starts when the library loads, so that no retire(),
// rcu_call() or rcu_barrier() has to create a thread (and allocate) on its way. One that
// cannot start then is tried again at the first callback, which aborts if it fails again.
const bool callback_threads_at_load = [] {
  for (rcu_kind k : all_rcu_kinds)
    (void)start_callback_thread(state_of(k));
  rcu_watchdog_install();  // the stall detector, ready before the first grace period
  return true;
}();

void barrier_from_callback(rcu_state& st) {
  // The callback thread cannot wait for a barrier node only it can run: it runs what the
  // barrier waits for itself. First the rest of the batch in progress (its grace period
  // has passed), then everything queued since (after a grace period, in run_batch).
  // Barrier nodes met on the way were queued after the calling callback: they signal once
  // it has returned.
  ++tls_barrier_depth;
  if (tls_batch_rest) {
    rcu_head*& rest = *tls_batch_rest;
    while (rest) {
      rcu_head* const h = rest;
      rest = h->_Qrcu_next;
      invoke_or_defer(st, h);
    }
  }
  if (rcu_head* newer = st.callbacks.head.exchange(nullptr, std::memory_order_acquire)) {
    std::uint64_t count = 0;
    rcu_head* const fifo = reversed(newer, count);
    run_batch(st, fifo, count, /*top=*/false);
  }
  --tls_barrier_depth;
}

namespace {

// Whether a thread queueing a callback may wait for the domain's backlog to drain. It must
// not hold up a grace period while it waits: no read-side critical section of the domain
// (default domain), offline (QSBR: an online thread that waits stalls the grace periods
// the callbacks need), never for Tasks (every running thread is a Tasks reader); and it
// must not be the callback thread, the one draining.
bool may_wait_for_backlog(rcu_state& st) noexcept {
  if (on_callback_thread_of(st)) return false;
  switch (st.kind) {
    case rcu_kind::memb:
      return !memb_in_section();
    case rcu_kind::qsbr:
      return !rcu_thread_is_online(st.domain);
    case rcu_kind::tasks:
      break;
  }
  return false;
}

std::uint64_t backlog(const rcu_callbacks& cb) noexcept {
  const std::uint64_t q = cb.queued.load(std::memory_order_seq_cst);
  const std::uint64_t f = cb.finished.load(std::memory_order_seq_cst);
  return q > f ? q - f : 0;
}

// Waits until the backlog is under half the limit (the callback thread runs batches back
// to back meanwhile). A voluntary block: a worker's pool may start another worker.
void wait_for_backlog(rcu_state& st, std::uint64_t limit) noexcept {
  rcu_callbacks& cb = st.callbacks;
  rcu_voluntary_block blocking;
  cb.backlog_waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint32_t seen = cb.drained.load(std::memory_order_seq_cst);
    if (backlog(cb) < limit / 2 + 1) break;
    futex_wait(cb.drained, seen);
  }
  cb.backlog_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace

void rcu_enqueue(rcu_domain& domain, rcu_head* head) noexcept {
  rcu_state& st = state_of(domain);
  rcu_callbacks& cb = st.callbacks;
  if (const std::uint64_t limit = g_callback_limit.load(std::memory_order_relaxed);
      backlog(cb) >= limit && !mutant::rcu_flood_uncapped && may_wait_for_backlog(st))
      [[unlikely]] {
    wait_for_backlog(st, limit);
  }
  enqueue_node(st, head);
}

void enqueue_node(rcu_state& st, rcu_head* head) noexcept {
  rcu_callbacks& cb = st.callbacks;
  if (!cb.started.load(std::memory_order_acquire)) [[unlikely]] {
    if (const int err = start_callback_thread(st); err != 0) {
      die("%s: cannot start the callback thread: %s; no callback could ever run", st.name,
          std::strerror(err));
    }
  }
  cb.queued.fetch_add(1, std::memory_order_relaxed);
  rcu_head* old = cb.head.load(std::memory_order_relaxed);
  do {
    head->_Qrcu_next = old;
  } while (!cb.head.compare_exchange_weak(old, head, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  // The first callback queued after the thread went to sleep wakes it, once: it takes the
  // sleep, so those queued until the thread runs (tens of microseconds when it wakes on an
  // idle CPU here) pay no system call. Each of them used to: a burst of 2,000 retires after a
  // quiet spell made ~530 futex calls and took 920 us.
  if (cb.sleeping.load(std::memory_order_seq_cst) &&
      (mutant::rcu_wakes_every_enqueue || cb.sleeping.exchange(false, std::memory_order_seq_cst))) {
    cb.wakeups.fetch_add(1, std::memory_order_relaxed);
    cb.wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(cb.wake);
  }
}

}  // namespace quiesce::detail

namespace quiesce {

namespace {

struct function_node final : detail::rcu_head {
  explicit function_node(std::function<void()> f) : fn(std::move(f)) { _Qrcu_func = &run; }
  static void run(detail::rcu_head* h) {
    std::unique_ptr<function_node> self(static_cast<function_node*>(h));
    self->fn();
  }
  std::function<void()> fn;
};

}  // namespace

void rcu_call(rcu_domain& domain, std::function<void()> fn) {
  if (!fn) throw std::invalid_argument("fn: rcu_call needs a function");
  auto node = std::make_unique<function_node>(std::move(fn));
  detail::rcu_enqueue(domain, node.release());
}

void set_rcu_callback_limit(std::size_t limit) {
  if (limit == 0) throw std::invalid_argument("limit: at least 1 callback");
  detail::g_callback_limit.store(limit, std::memory_order_relaxed);
}

std::size_t rcu_callback_limit() noexcept {
  return detail::g_callback_limit.load(std::memory_order_relaxed);
}

void rcu_barrier(rcu_domain& domain) noexcept {
  detail::rcu_state& st = detail::state_of(domain);
  if (detail::barrier_inside_reader(st)) return;
  if (detail::on_callback_thread_of(st)) {
    detail::barrier_from_callback(st);
    return;
  }
  rcu_voluntary_block blocking;
  detail::offline_for_wait offline(st);  // an online QSBR caller would wait for itself
  detail::blocking_waiter me(st);
  me.list();  // the callback thread must run a grace period first: we block
  if constexpr (detail::mutant::rcu_barrier_no_wait) return;
  detail::barrier_node node;
  detail::enqueue_node(st, &node);  // a barrier is not a flood: it never waits to queue
  while (node.done.load(std::memory_order_acquire) == 0)
    detail::futex_wait(node.done, 0);
}

rcu_cookie rcu_start_poll(rcu_domain& domain) {
  const rcu_cookie cookie = rcu_get_cookie(domain);
  // An empty callback makes the callback thread run a grace period, which is at least
  // the one the cookie names.
  rcu_call(domain, [] {});
  return cookie;
}

rcu_stats rcu_domain_stats(rcu_domain& domain) {
  detail::rcu_state& st = detail::state_of(domain);
  rcu_stats s;
  s.domain = st.name;
  s.gp_started = st.gp_started.load(std::memory_order_seq_cst);
  s.gp_completed = st.gp_completed.load(std::memory_order_seq_cst);
  const std::uint64_t served = st.sync_served.load(std::memory_order_relaxed);
  s.synchronize_calls = st.sync_calls.load(std::memory_order_relaxed) + served;
  s.synchronize_shared = st.sync_shared.load(std::memory_order_relaxed) + served;
  s.callbacks_queued = st.callbacks.queued.load(std::memory_order_relaxed);
  s.callbacks_invoked = st.callbacks.invoked.load(std::memory_order_relaxed);
  s.callback_batches = st.callbacks.batches.load(std::memory_order_relaxed);
  s.callback_exceptions = st.callbacks.exceptions.load(std::memory_order_relaxed);
  s.misuse_reports = st.misuse.load(std::memory_order_relaxed);
  s.stall_infos = st.stall_infos.load(std::memory_order_relaxed);
  s.stalls = st.stalls.load(std::memory_order_relaxed);
  s.hung_waiters = st.hung.load(std::memory_order_relaxed);
  {
    detail::lock_guard guard(st.registry_lock);
    s.registered_threads = static_cast<int>(st.readers.size());
  }
  {
    detail::lock_guard guard(st.waiters_lock);
    s.waiting_threads = static_cast<int>(st.waiters.size());
  }
  {
    detail::lock_guard guard(st.stats_lock);
    s.gp_duration_ns = st.gp_duration_ns;
  }
  s.gp_duration_ns.record_n(0, st.gp_untimed.load(std::memory_order_relaxed));
  s.membarrier =
      st.flavor.marked_sections && detail::memb.membarrier.load(std::memory_order_relaxed);
  return s;
}

}  // namespace quiesce
