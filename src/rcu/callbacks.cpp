// Callbacks: rcu_retire / rcu_call / retire queue on the domain's callback thread, which
// takes everything queued, waits one grace period for the batch, then runs it in order.
#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <thread>

#include "../base/futex.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::detail {

bool barrier_inside_reader(rcu_state& st);
bool on_callback_thread_of(const rcu_state& st) noexcept;
void barrier_from_callback(rcu_state& st);

namespace {

constexpr std::uint64_t coalesce_ns = 1'000'000;  // a rate limit, not a synchronisation

// A node that signals a waiter when the callback thread reaches it (rcu_barrier).
struct barrier_node final : rcu_head {
  barrier_node() { func = &signal; }
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
    h->func(h);
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
  if (tls_barrier_depth > 0 && h->func == &barrier_node::signal) {
    h->next = nullptr;
    *tls_deferred_tail = h;
    tls_deferred_tail = &h->next;
    return;
  }
  invoke(st, h);
}

void signal_deferred_barriers() {
  rcu_head* h = tls_deferred_first;
  tls_deferred_first = nullptr;
  tls_deferred_tail = &tls_deferred_first;
  while (h) {
    rcu_head* const next = h->next;  // read first: the waiter may return and free it
    h->func(h);
    h = next;
  }
}

void run_batch(rcu_state& st, rcu_head* newest_first) {
  // The stack holds the newest first: reverse it so callbacks run in queueing order.
  rcu_head* fifo = nullptr;
  std::uint64_t count = 0;
  while (newest_first) {
    rcu_head* next = newest_first->next;
    newest_first->next = fifo;
    fifo = newest_first;
    newest_first = next;
    ++count;
  }
  synchronize(st);  // one grace period for the whole batch
  rcu_callbacks& cb = st.callbacks;
  // Counted before they run, so a barrier's waiter (woken by its own node) sees them.
  cb.invoked.fetch_add(count, std::memory_order_relaxed);
  cb.batches.fetch_add(1, std::memory_order_relaxed);
  rcu_head** const outer = tls_batch_rest;
  tls_batch_rest = &fifo;  // a nested rcu_barrier() runs the rest of the batch
  while (fifo) {
    rcu_head* const h = fifo;
    fifo = h->next;  // advanced first: the callback may free its node
    invoke_or_defer(st, h);
    if (tls_barrier_depth == 0) signal_deferred_barriers();  // a top-level callback returned
  }
  tls_batch_rest = outer;
}

void callback_thread(rcu_state& st) {
  set_this_thread_name(fmt::format("{}_cb", st.name));
  tls_callback_domain = &st;
  rcu_callbacks& cb = st.callbacks;
  std::uint64_t last_batch_ns = 0;
  for (;;) {
    if (cb.head.load(std::memory_order_relaxed) != nullptr) {
      // Coalescing: at most one batch per millisecond while callbacks stream in, so a
      // stream of retires pays for few grace periods and frees memory in bulk (liburcu's
      // call_rcu thread waits 10 ms; batches of a few callbacks made malloc the bottleneck:
      // 4.1 -> 6.0 M retires/s). A callback after a quiet spell starts its batch at once.
      const std::uint64_t since = now_ns() - last_batch_ns;
      if (since < coalesce_ns) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(coalesce_ns - since));
      }
      last_batch_ns = now_ns();
      run_batch(st, cb.head.exchange(nullptr, std::memory_order_acquire));
      continue;
    }
    // Sleep until a callback is queued (Dekker with rcu_enqueue on sleeping/head).
    const std::uint32_t seen = cb.wake.load(std::memory_order_seq_cst);
    cb.sleeping.store(true, std::memory_order_seq_cst);
    if (cb.head.load(std::memory_order_seq_cst) == nullptr) {
      futex_wait(cb.wake, seen);
    }
    cb.sleeping.store(false, std::memory_order_seq_cst);
  }
}

void start_thread(rcu_state& st) noexcept {
  try {
    std::call_once(st.callbacks.started, [&st] {
      st.callbacks.thread = std::thread(callback_thread, std::ref(st));
      st.callbacks.thread.detach();  // runs for the life of the process (see rcu.hpp)
    });
  } catch (const std::exception& e) {
    log(log_level::err,
        fmt::format("{}: cannot start the callback thread: {}; callbacks will not run", st.name,
                    e.what()));
  }
}

}  // namespace

bool on_callback_thread_of(const rcu_state& st) noexcept {
  return tls_callback_domain == &st;
}

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
      rest = h->next;
      invoke_or_defer(st, h);
    }
  }
  if (rcu_head* newer = st.callbacks.head.exchange(nullptr, std::memory_order_acquire)) {
    run_batch(st, newer);
  }
  --tls_barrier_depth;
}

void rcu_enqueue(rcu_domain& domain, rcu_head* head) noexcept {
  rcu_state& st = state_of(domain);
  rcu_callbacks& cb = st.callbacks;
  start_thread(st);
  cb.queued.fetch_add(1, std::memory_order_relaxed);
  rcu_head* old = cb.head.load(std::memory_order_relaxed);
  do {
    head->next = old;
  } while (!cb.head.compare_exchange_weak(old, head, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  if (cb.sleeping.load(std::memory_order_seq_cst)) {
    cb.wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(cb.wake);
  }
}

}  // namespace quiesce::detail

namespace quiesce {

namespace {

struct function_node final : detail::rcu_head {
  explicit function_node(std::function<void()> f) : fn(std::move(f)) { func = &run; }
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

void rcu_barrier(rcu_domain& domain) noexcept {
  detail::rcu_state& st = detail::state_of(domain);
  if (detail::barrier_inside_reader(st)) return;
  if (detail::on_callback_thread_of(st)) {
    detail::barrier_from_callback(st);
    return;
  }
  rcu_voluntary_block blocking;
  detail::offline_for_wait offline(st);  // an online QSBR caller would wait for itself
  std::optional<detail::listed_waiter> listed;
  try {
    listed.emplace(st);
  } catch (...) {  // out of memory for the name: wait unlisted
  }
  detail::barrier_node node;
  detail::rcu_enqueue(domain, &node);
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
  s.synchronize_calls = st.sync_calls.load(std::memory_order_relaxed);
  s.synchronize_shared = st.sync_shared.load(std::memory_order_relaxed);
  s.callbacks_queued = st.callbacks.queued.load(std::memory_order_relaxed);
  s.callbacks_invoked = st.callbacks.invoked.load(std::memory_order_relaxed);
  s.callback_batches = st.callbacks.batches.load(std::memory_order_relaxed);
  s.callback_exceptions = st.callbacks.exceptions.load(std::memory_order_relaxed);
  s.misuse_reports = st.misuse.load(std::memory_order_relaxed);
  s.stall_infos = st.stall_infos.load(std::memory_order_relaxed);
  s.stalls = st.stalls.load(std::memory_order_relaxed);
  s.hung_waiters = st.hung.load(std::memory_order_relaxed);
  {
    std::lock_guard guard(st.registry_lock);
    s.registered_threads = static_cast<int>(st.readers.size());
  }
  {
    std::lock_guard guard(st.waiters_lock);
    s.waiting_threads = static_cast<int>(st.waiters.size());
  }
  {
    std::lock_guard guard(st.stats_lock);
    s.gp_duration_ns = st.gp_duration_ns;
  }
  s.membarrier =
      st.kind == detail::rcu_kind::memb && detail::memb.membarrier.load(std::memory_order_relaxed);
  return s;
}

}  // namespace quiesce
