// SPDX-License-Identifier: Apache-2.0
// quiesce/rcu.hpp - read-copy-update: the C++26 <rcu> API (P2545R4), plus the QSBR and
// Tasks flavors, callbacks, polling and statistics.
//
// The standard names, exactly, in namespace quiesce: rcu_domain, rcu_default_domain(),
// rcu_synchronize(), rcu_barrier(), rcu_retire(), rcu_obj_base. A program written against
// them compiles against std:: once a standard library ships <rcu> (change the namespace).
//
// Three domains exist; none can be created by users (the standard gives rcu_domain no
// public constructor):
//   rcu_default_domain()  readers mark sections with lock()/unlock() (std::scoped_lock
//                         works): a thread-local word and compiler barriers when
//                         membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is available, fences
//                         otherwise (liburcu's "memb" flavor). Threads register on first use.
//   rcu_qsbr_domain()     quiescent-state-based: lock()/unlock() cost nothing; a thread that
//                         reads must be online (rcu_thread_online) and report
//                         rcu_quiescent_state() outside its read sections, or go offline
//                         around blocking (liburcu's "qsbr" flavor).
//   rcu_tasks_domain()    the kernel's RCU Tasks: a registered (online) thread passes a
//                         quiescent state only voluntarily - cond_resched_tasks_qs(),
//                         blocking in a quiesce primitive (an idle workqueue worker, a
//                         may_block scope, a flush, rcu_synchronize itself), or being
//                         offline. cond_resched() alone reports nothing (seed 003).
//
// What the standard leaves open, and what quiesce chose:
//  - Whether unlock() and rcu_retire() run ready callbacks inline: they never do; every
//    callback runs on the domain's callback thread, after one grace period per batch.
//    While callbacks stream in, batches start at most once per millisecond (so a callback
//    may wait up to ~1 ms plus a grace period; liburcu waits 10 ms).
//  - Memory under a retire flood: the callbacks of a domain queued and not yet run are
//    bounded. A retire()/rcu_retire()/rcu_call() that finds rcu_callback_limit() of them
//    (default 1,048,576; the kernel's qhimark idea) waits until the callback thread - which
//    then runs batches back to back - has run all but half - when the calling thread may
//    wait without holding up a grace period: in no read-side critical section of the
//    default domain, offline in QSBR, and not the callback thread. Elsewhere (inside a
//    section, online in QSBR, any Tasks caller) it queues past the limit and never
//    blocks. So a thread that retires outside its sections never has more than the limit
//    of its domain's callbacks pending (liburcu's call_rcu has no bound).
//  - Whether rcu_synchronize()/rcu_barrier() may be called inside a read-side section
//    (undefined there, a deadlock in general): quiesce reports it through the log sink
//    ("rcu_synchronize() called inside a read-side critical section") and returns at once
//    without waiting, as liburcu does. (Detected for the default domain, whose sections are
//    marked; a QSBR/Tasks caller that is online is taken offline for the wait instead.)
//  - rcu_barrier() waits for callbacks queued before it on that domain, not for a grace
//    period beyond that (call rcu_synchronize() for that). Called from a callback or
//    deleter of the same domain (on its callback thread), it runs the callbacks it has to
//    wait for itself - the rest of the batch in progress, whose grace period has passed,
//    then, after a grace period, everything queued since - as P2545 allows ("may evaluate
//    any scheduled evaluations").
//  - Read-side nesting in the default domain is limited to 65,535 levels; lock() at that
//    depth aborts the process with a message naming it (a deeper reader must never look
//    idle to a grace period).
//  - Callbacks still queued at process exit are not run.
//
// Threads. A thread registers itself at its first lock() (default domain) or
// rcu_thread_online() (QSBR, Tasks), into storage of its own (thread-local, never the
// heap). It is unregistered after every thread_local destructor of the thread has run
// (by a pthread key destructor), so read-side sections and online spells inside
// thread_local destructors hold grace periods like any other. A thread that exits online
// is taken offline.
//
// Never allocates. lock(), unlock(), try_lock(), rcu_obj_base::retire(),
// rcu_synchronize(), rcu_barrier(), rcu_quiescent_state(), rcu_get_cookie() and
// rcu_poll_done() never allocate from the heap on any path (also the first call on a
// thread), so they work under memory exhaustion. The callback threads and the stall
// detector start when the library loads, not at the first callback. rcu_retire() and
// rcu_call() allocate a node and may throw std::bad_alloc; then nothing was scheduled.
// (With tracing enabled, a thread's first trace event allocates its ring, and drops the
// event if that fails.)
//
// Aborts. Where a noexcept primitive cannot keep its promise it prints "quiesce: ..." to
// stderr and aborts - it never returns as if a grace period had passed (liburcu's
// urcu_die): membarrier failing after it was registered at load; a callback thread that
// cannot be started at the first callback; a lock that cannot be taken; nesting beyond
// the limit; fork() inside a default-domain read-side section (see below).
//
// fork() without exec. The library's fork handlers make RCU work in the child: before
// the fork the forking thread goes offline in QSBR and Tasks (and back online after, in
// parent and child), every callback thread stops between two callbacks and no grace
// period is in progress; in the child only the forking thread is registered, callbacks
// queued and not yet run in the parent run in the child after a grace period of the
// child, and new callback threads run them. A child may use every RCU function. The rules:
// do not fork inside a default-domain read-side section (a grace period in progress would
// wait for the forking thread while it waits for that grace period: it aborts instead);
// a callback that was running when the fork happened does not run again in the child.
// The stall detector does not run in a child. Workqueues: see quiesce/workqueue.hpp (a
// child of a process that had started them cannot use them; every call throws).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "quiesce/histogram.hpp"

namespace quiesce {

class rcu_domain;

namespace detail {

// The three flavours of domain. The one enum for the concept: the inline read side
// switches on it, and src/rcu keeps a table per flavour (src/rcu/flavor.cpp).
enum class rcu_kind : unsigned char { memb, qsbr, tasks };
// Every flavour, in enum order: what src/rcu builds its domains, states and threads from.
inline constexpr rcu_kind all_rcu_kinds[] = {rcu_kind::memb, rcu_kind::qsbr, rcu_kind::tasks};

// A queued callback: intrusive, so rcu_obj_base::retire() needs no allocation. Trivially
// copyable, as [saferecl.rcu.base] requires of rcu_obj_base; the member names are reserved
// ones, so that they never collide with a name in a class derived from rcu_obj_base.
struct rcu_head {
  rcu_head* _Qrcu_next = nullptr;           // the callback queue's link
  void (*_Qrcu_func)(rcu_head*) = nullptr;  // runs (and disposes of) the callback
};

// Queues `head` on the domain's callback thread. Never allocates, never throws.
void rcu_enqueue(rcu_domain& domain, rcu_head* head) noexcept;

// ---- default domain (memb) read side: inline, as liburcu's urcu/static/urcu-memb.h ----
inline constexpr std::uint64_t memb_nest_mask = 0xffff;  // low 16 bits: nesting depth
inline constexpr int memb_snapshot_shift = 16;           // high 48 bits: grace-period number

// This thread's reader word: (grace-period number seen at the outermost lock << 16) |
// nesting. Written only by its thread (relaxed/release), read by writers (acquire).
// Constant-initialised and trivially destructible, so access needs no TLS wrapper call.
// While the thread is not in the registry the word is memb_unregistered: it reads as
// nested to the deepest level, so lock()'s one test of the word, the nesting test, also
// sends a thread that must register first to the slow path (no second load on the hot
// path). Writers never read it then: they read only registered threads' words.
inline constexpr std::uint64_t memb_unregistered = memb_nest_mask;
struct memb_reader {
  std::atomic<std::uint64_t> word{memb_unregistered};  // A
  bool registered = false;                             // W: in the domain's registry
};
inline thread_local memb_reader tls_memb;

// Global state of the default domain read by the inline read side.
struct memb_shared {
  std::atomic<std::uint64_t> gp_ctr{0};   // A: current grace-period number << 16
  std::atomic<std::uint32_t> waiting{0};  // A: a writer sleeps waiting for readers
  std::atomic<bool> membarrier{false};    // A: set once: membarrier is registered
};
extern memb_shared memb;

// lock() that found the word at its deepest nesting: a thread not yet registered
// (memb_unregistered) registers and enters its outermost section; a registered one is
// nested 65,535 levels deep, and aborts with a message.
void memb_lock_slow() noexcept;
void memb_wake_writer() noexcept;

// The read side's barrier: with membarrier the writer forces the ordering with an IPI, so
// a compiler barrier is enough here; otherwise a full fence. `membarrier` is
// memb.membarrier, loaded by the caller (once for both of unlock()'s barriers).
inline void memb_barrier(bool membarrier) noexcept {
#if defined(__SANITIZE_THREAD__)
  (void)membarrier;
  std::atomic_thread_fence(std::memory_order_seq_cst);
#else
  if (membarrier) [[likely]] {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
#endif
}

// The outermost lock(): the word takes the current grace-period number.
inline void memb_enter_outermost(memb_reader& r) noexcept {
  r.word.store(memb.gp_ctr.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // the word is visible before any read of protected data
  memb_barrier(memb.membarrier.load(std::memory_order_relaxed));
}

inline void memb_lock() noexcept {
  memb_reader& r = tls_memb;
  const std::uint64_t w = r.word.load(std::memory_order_relaxed);
  if (w & memb_nest_mask) [[unlikely]] {  // nested: just count (the outermost is the hot path)
    if ((w & memb_nest_mask) == memb_nest_mask) [[unlikely]] {
      memb_lock_slow();  // unregistered, or one more would carry into the grace period
      return;
    }
    r.word.store(w + 1, std::memory_order_relaxed);
    return;
  }
  memb_enter_outermost(r);
}

inline void memb_unlock() noexcept {
  memb_reader& r = tls_memb;
  const std::uint64_t w = r.word.load(std::memory_order_relaxed);
  if ((w & memb_nest_mask) > 1) [[unlikely]] {  // nested
    r.word.store(w - 1, std::memory_order_relaxed);
    return;
  }
  const bool membarrier = memb.membarrier.load(std::memory_order_relaxed);
  memb_barrier(membarrier);  // every read of protected data is done before the word says so
  r.word.store(w - 1, std::memory_order_release);
  memb_barrier(membarrier);
  if (memb.waiting.load(std::memory_order_relaxed)) [[unlikely]]
    memb_wake_writer();
}

// ---- QSBR and Tasks: per-thread quiescent-state counters ----
// A registered thread's counter: 0 while offline, else the grace-period counter value at
// its last quiescent state. Written by its thread, read by writers.
struct qs_reader {
  std::atomic<std::uint64_t> ctr{0};  // A
  bool registered = false;            // W
};
inline thread_local qs_reader tls_qsbr;
inline thread_local qs_reader tls_tasks;

struct qs_shared {
  std::atomic<std::uint64_t> gp_ctr{1};   // A: 1 + grace periods started
  std::atomic<std::uint32_t> waiting{0};  // A: a writer sleeps waiting for threads
};
extern qs_shared qsbr;
extern qs_shared tasks;

void qs_report_slow(qs_shared& shared, qs_reader& reader) noexcept;

inline void qs_report(qs_shared& shared, qs_reader& reader) noexcept {
  // Nothing started since our last report: nothing to do. (Offline, our counter is 0,
  // which the shared counter never is: the slow path sees that and stays offline.)
  // (The hint keeps the report out of line: a loop of reports then takes one branch per turn.)
  if (reader.ctr.load(std::memory_order_relaxed) != shared.gp_ctr.load(std::memory_order_relaxed))
      [[unlikely]] {
    qs_report_slow(shared, reader);
  }
}

struct rcu_access;

}  // namespace detail

// A domain of readers and grace periods. Meets Cpp17Lockable: lock() and unlock() bracket a
// read-side critical section (nestable). No public constructor, not copyable.
class rcu_domain {
 public:
  rcu_domain(const rcu_domain&) = delete;
  rcu_domain& operator=(const rcu_domain&) = delete;

  // Enters a read-side critical section. Default domain: a few ns, never blocks; the first
  // call on a thread registers it (takes a lock once). QSBR and Tasks domains: nothing.
  void lock() noexcept;
  // Always succeeds (P2545).
  bool try_lock() noexcept {
    lock();
    return true;
  }
  // Leaves the read-side critical section entered by the matching lock().
  void unlock() noexcept;

  // "rcu" (default), "rcu_qsbr" or "rcu_tasks": the name used in stall reports.
  const char* name() const noexcept;

 private:
  friend struct detail::rcu_access;
  constexpr explicit rcu_domain(detail::rcu_kind k) noexcept : kind_(k) {}
  const detail::rcu_kind kind_;
};

namespace detail {
// The three domain objects, indexed by rcu_kind (defined in src/rcu/domain.cpp). The inline
// read side tells a domain by its address, which the compiler knows (a constant, or a
// register it compares once per loop), not by a field it would load again after every
// compiler barrier.
extern std::array<rcu_domain, std::size(all_rcu_kinds)> domain_objects;
constexpr rcu_domain& domain_object(rcu_kind k) noexcept {
  return domain_objects[static_cast<std::size_t>(k)];
}
}  // namespace detail

// The three domains. Valid for the whole life of the process.
inline rcu_domain& rcu_default_domain() noexcept {
  return detail::domain_object(detail::rcu_kind::memb);
}
inline rcu_domain& rcu_qsbr_domain() noexcept {
  return detail::domain_object(detail::rcu_kind::qsbr);
}
inline rcu_domain& rcu_tasks_domain() noexcept {
  return detail::domain_object(detail::rcu_kind::tasks);
}

// Waits until every read-side critical section (default domain) or every online thread
// (QSBR, Tasks) that existed when it was called has ended or passed a quiescent state.
// Concurrent callers share grace periods. Spins briefly, then blocks. Blocks for as long
// as a holdout holds out (seed 003) - the watchdog reports it. See the header comment for
// calls from inside a read-side section.
void rcu_synchronize(rcu_domain& domain = rcu_default_domain()) noexcept;

// Waits until every callback queued (rcu_retire, rcu_call, retire) on `domain` before the
// call has run. A QSBR thread that is online is taken offline for the wait (it comes back
// online after); from a callback of the same domain, see the header comment.
void rcu_barrier(rcu_domain& domain = rcu_default_domain()) noexcept;

namespace detail {
template <typename T, typename D>
struct retire_node final : rcu_head {
  retire_node(T* p, D d) : ptr(p), deleter(std::move(d)) { _Qrcu_func = &run; }
  static void run(rcu_head* h) {
    std::unique_ptr<retire_node> self(static_cast<retire_node*>(h));
    self->deleter(self->ptr);
  }
  T* ptr;
  D deleter;
};
}  // namespace detail

// Schedules deleter(p) after a grace period of `domain`. May throw std::bad_alloc (it
// allocates one small node); then nothing is scheduled and p is untouched.
template <typename T, typename D = std::default_delete<T>>
void rcu_retire(T* p, D deleter = D(), rcu_domain& domain = rcu_default_domain()) {
  auto node = std::make_unique<detail::retire_node<T, D>>(p, std::move(deleter));
  detail::rcu_enqueue(domain, node.release());  // the queue owns it from here
}

// Base of objects that retire themselves: `obj->retire()` schedules the deleter after a
// grace period without allocating (the queue link lives in the object).
template <typename T, typename D = std::default_delete<T>>
class rcu_obj_base : private detail::rcu_head {
 public:
  void retire(D __d = D(), rcu_domain& __dom = rcu_default_domain()) noexcept {
    _Qrcu_deleter = std::move(__d);
    this->_Qrcu_func = &_Qrcu_reclaim;
    detail::rcu_enqueue(__dom, this);
  }

 protected:
  rcu_obj_base() = default;
  rcu_obj_base(const rcu_obj_base&) = default;
  rcu_obj_base(rcu_obj_base&&) = default;
  rcu_obj_base& operator=(const rcu_obj_base&) = default;
  rcu_obj_base& operator=(rcu_obj_base&&) = default;
  ~rcu_obj_base() = default;

 private:
  static void _Qrcu_reclaim(detail::rcu_head* __h) {
    auto* __self = static_cast<rcu_obj_base*>(__h);
    D __d = std::move(__self->_Qrcu_deleter);
    __d(static_cast<T*>(__self));
  }
  [[no_unique_address]] D _Qrcu_deleter{};
};

// ---- Extensions (not in P2545) ----

// QSBR / Tasks: the calling thread now holds grace periods (its reads are protected until
// its next quiescent state). Registers it on first use. Throws std::invalid_argument for
// the default domain (its threads register themselves).
void rcu_thread_online(rcu_domain& domain);
// ...and no longer does: it must hold no reference to protected data. Use around blocking
// and before thread exit (a thread that exits online is taken offline automatically).
void rcu_thread_offline(rcu_domain& domain);
// Whether the calling thread is online in `domain` (default domain: registered).
bool rcu_thread_is_online(rcu_domain& domain) noexcept;

// QSBR / Tasks: reports a quiescent state for the calling thread (it holds no reference to
// protected data now). About 1 ns when no grace period is waiting on it. No effect on the
// default domain or on an offline thread.
inline void rcu_quiescent_state(rcu_domain& domain) noexcept;

// Yields the CPU if another thread may want it (a sched_yield at most once per
// millisecond of calls). Reports no quiescent state to any domain - the bug of seed 003.
void cond_resched() noexcept;
// Reports a Tasks quiescent state for the calling thread, then cond_resched() (the kernel's
// cond_resched_tasks_rcu_qs()).
void cond_resched_tasks_qs() noexcept;

// RAII: the calling thread blocks voluntarily for the scope (waits on a lock, a condition,
// I/O). For the Tasks domain that is a quiescent state: an online thread goes offline for
// the scope and comes back online after. QSBR and default-domain threads are unaffected
// (they may hold references across a block). quiesce's own blocking primitives (may_block,
// idle workers, flushes, rcu_synchronize) do this already. On a workqueue worker it is also
// a may_block: the worker stops counting as running for its pool while the scope lasts.
class rcu_voluntary_block {
 public:
  rcu_voluntary_block() noexcept;
  ~rcu_voluntary_block();
  rcu_voluntary_block(const rcu_voluntary_block&) = delete;
  rcu_voluntary_block& operator=(const rcu_voluntary_block&) = delete;

 private:
  bool was_online_;
};

// call_rcu: runs fn on the domain's callback thread after a grace period. Throws
// std::bad_alloc (nothing scheduled) or std::invalid_argument for an empty fn.
void rcu_call(rcu_domain& domain, std::function<void()> fn);

// The flood bound above, for every domain: callbacks queued and not yet run past which a
// thread that may wait does, until half are left. Throws std::invalid_argument for 0.
void set_rcu_callback_limit(std::size_t limit);
std::size_t rcu_callback_limit() noexcept;

// Polling (liburcu 0.14's start_poll_synchronize_rcu / poll_state_synchronize_rcu): a cookie
// taken now names the first grace period that starts after it; rcu_poll_done() says
// whether that one has completed. rcu_start_poll() also makes sure it will start.
struct rcu_cookie {
  std::uint64_t gp = 0;  // the grace period that must complete
};
rcu_cookie rcu_get_cookie(rcu_domain& domain) noexcept;
rcu_cookie rcu_start_poll(rcu_domain& domain);
bool rcu_poll_done(rcu_domain& domain, rcu_cookie cookie) noexcept;

// Grace-period and callback statistics of a domain.
struct rcu_stats {
  std::string domain;
  std::uint64_t gp_started = 0;  // grace-period sequence numbers
  std::uint64_t gp_completed = 0;
  std::uint64_t synchronize_calls = 0;
  std::uint64_t synchronize_shared = 0;  // calls satisfied by another caller's grace period
  std::uint64_t callbacks_queued = 0;
  std::uint64_t callbacks_invoked = 0;  // taken for invocation (a batch counts as it starts)
  std::uint64_t callback_batches = 0;   // counted as each batch starts running
  std::uint64_t callback_exceptions = 0;
  std::uint64_t misuse_reports = 0;  // synchronize/barrier inside a read-side section
  std::uint64_t stall_infos = 0;     // "grace period number N ... is M ms old"
  std::uint64_t stalls = 0;          // "detected stalls on threads"
  std::uint64_t hung_waiters = 0;    // "INFO: task NAME:TID blocked for more than N seconds."
  int registered_threads = 0;        // threads in the domain's registry now
  int waiting_threads = 0;           // threads blocked in rcu_synchronize/rcu_barrier now
  // Grace periods, from the first scan that found a reader holding one to its end; one
  // whose first scan found none (it waited for no one, well under a microsecond) is not
  // timed and counts as 0 ns.
  histogram gp_duration_ns;
  bool membarrier = false;  // default domain: readers use compiler barriers only
};
rcu_stats rcu_domain_stats(rcu_domain& domain);

// ---- inline definitions ----

struct detail::rcu_access {
  static constexpr rcu_kind kind(const rcu_domain& d) noexcept { return d.kind_; }
  static constexpr rcu_domain make(rcu_kind k) noexcept { return rcu_domain(k); }
};

inline void rcu_domain::lock() noexcept {
  if (this == &rcu_default_domain()) detail::memb_lock();
}

inline void rcu_domain::unlock() noexcept {
  if (this == &rcu_default_domain()) detail::memb_unlock();
}

inline void rcu_quiescent_state(rcu_domain& domain) noexcept {
  if (&domain == &rcu_qsbr_domain()) {
    detail::qs_report(detail::qsbr, detail::tls_qsbr);
  } else if (&domain == &rcu_tasks_domain()) {
    detail::qs_report(detail::tasks, detail::tls_tasks);
  }
}

}  // namespace quiesce
