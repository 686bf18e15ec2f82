// SPDX-License-Identifier: Apache-2.0
// quiesce/workqueue.hpp - the Linux kernel's concurrency-managed workqueue (cmwq) for
// user-space C++.
//
// A work item is a function plus a pending bit. Queueing it on a workqueue hands it to a
// worker pool: per-CPU ("bound") pools whose workers are pinned to their CPU and run one
// item at a time while it keeps running (concurrency management), or unbound pools per
// affinity scope whose workers start every item at once. Pools are shared by all
// workqueues with the same attributes, exactly as in the kernel: a work item that hogs a
// per-CPU pool delays every other bound workqueue's items on that CPU - the lockup of
// seed 000 - unless the watchdog (quiesce/watchdog.hpp) notices and starts another worker.
//
// Semantics (kernel/workqueue.c):
//  - queue() test-and-sets the pending bit and returns false if it was already set.
//  - The pending bit is cleared (with a full barrier) before the function runs, so queueing
//    the item again during its execution runs it once more, after the current run.
//  - An item never runs on two workers at once: a new instance of a running item goes to
//    the worker that runs it.
//  - Per-CPU pools count running workers; another worker starts when the running one
//    blocks voluntarily (may_block, or any blocking wait of quiesce: flush, cancel_sync,
//    drain, rcu_synchronize, rcu_barrier), is found hogging the CPU, or is found asleep.
//  - While cancel_sync() of an item waits, the item is disabled (kernel 6.10 disable_work):
//    queueing it returns false and queues nothing, mod_delayed() returns true and queues
//    nothing, cancel() returns false at once. So periodic work that re-arms itself is torn
//    down with one cancel_sync(), as cancel_delayed_work_sync() does.
//
// Process exit: quiesce's exit hook (an atexit handler, registered when a queue first
// queues, so that it runs before the destructor of every static queue that has been used)
// ends the runtime's part in the process:
//  - from then on every queue(), queue_delayed() and mod_delayed() is refused (false; for
//    mod_delayed true, as for any refusal), also from work items: self-re-queueing stops;
//  - items that are queued, inactive or armed on the timer are dropped - they do not run;
//    their pending bit is cleared and flush(), cancel_sync() and drain() waiting on them
//    return (counted in wq_stats::dropped, or cancelled for armed items);
//  - items that are running finish on their workers; exit does not wait for them or join
//    any thread (so a running item that waits for a static object's destructor to stop it
//    does not hang exit). A static work item destroyed while its instance still runs waits
//    for that instance (instead of aborting).
//  - runtime objects (pools, workers, the timer, the watchdog, the log) are never destroyed,
//    so running items may use quiesce until the process ends. No user function starts after
//    the hook ran; a function already running when exit began may still use static objects
//    that are destroyed meanwhile - as any thread may: stop such items first.
//  - a queue destroyed after the hook ran (a static queue, say) does not drain or wait: its
//    queued items are being dropped, and its state is kept until the process ends for the
//    items still running.
// fork() without exec: a child forked after the process first created a workqueue has
// the parent's pools but none of their workers (nor the timer thread). In such a child
// every workqueue call - constructing a queue, queue*, mod_delayed, flush, cancel,
// cancel_sync, drain - throws std::logic_error saying so, instead of hanging; queue and
// work item destructors and the exit hook do nothing there, so the child exits normally.
// A child forked before any workqueue existed uses workqueues as usual (they start in it).
// Signals: the runtime's threads (workers, the timer, the watchdog, RCU's callback thread)
// block every asynchronous signal - all but SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
// SIGSYS, SIGABRT and SIGPROF - as the kernel's kthreads take none: a process-directed
// signal (SIGINT, SIGTERM, SIGUSR1...) is handled on one of the application's threads,
// never inside a work item. Work functions run with that mask, and a process one starts
// (posix_spawn, fork and exec) inherits it: set the child's mask where it matters
// (posix_spawnattr_setsigmask with POSIX_SPAWN_SETSIGMASK, or pthread_sigmask in the child).
//
// The hook runs before the destructor of a queue whose construction completed before the
// queue first queued. A queue that first queues while a larger static object holding it is
// still being constructed (queueing from that object's constructor), or that is constructed
// after the hook's last registration and destroyed before the hook, is destroyed as at any
// other time: it drains, and an item that re-queues itself for ever keeps it draining.
//
// Threading: every member function is thread-safe unless stated. Work functions may queue,
// cancel and flush other items, and queue and cancel() (not flush or cancel_sync)
// themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "quiesce/detail/work_fn.hpp"
#include "quiesce/detail/work_state.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/topology.hpp"

namespace quiesce {

class work;
class delayed_work;
class workqueue;

namespace detail {
struct wq_access;
struct wq_impl;

// A callable a work item of type Item can hold (invocable with the item).
template <class F, class Item>
concept item_function = std::is_invocable_v < std::decay_t<F>
&, Item& > ;

// The name, interned for the life of the process, of an item whose function is `fn`: the
// function's symbol or the callable's type (src/wq/work.cpp). Throws std::invalid_argument
// if `fn` is empty.
const std::string& name_of_function(const work_fn<work>& fn);
// `name`, interned; throws std::invalid_argument if `fn` is empty.
const std::string& name_item(std::string_view name, const work_fn<work>& fn);

// workqueue::post's nodes (src/wq/post.cpp).
struct posted_tag {};
// Memory for one posted item, from the calling CPU's free list. Throws std::logic_error in
// a forked child (as every workqueue call there does, `what` naming the call), or
// std::bad_alloc.
void* posted_alloc(const char* what);
// Destroys a posted item (from its own function, or when it was not queued) and returns
// its memory to the calling CPU's free list.
void posted_destroy(work& node) noexcept;
// Returns memory from posted_alloc that holds no item (its construction threw).
void posted_free(void* memory) noexcept;
// Queues a posted item; if the queue refuses it (false) or the call throws, destroys it.
bool posted_queue(workqueue& wq, int cpu, delayed_work& node, std::chrono::nanoseconds delay);
// The name of items posted with a callable of type `type`, interned.
const std::string& posted_name(const std::type_info& type);
template <class F>
const std::string& posted_name_of() {
  static const std::string& name = posted_name(typeid(F));
  return name;
}

// What a posted item runs: the user's callable, then the item's own destruction (also when
// the callable throws). The item is named after the callable.
template <class F>
struct posted_call {
  F fn;
  void operator()(work& self) {
    struct destroy_after {
      work& self;
      ~destroy_after() { posted_destroy(self); }
    } done{self};
    std::invoke(fn);
  }
  callable_identity identity() const noexcept { return identity_of(fn); }
};

// What a delayed item runs: the user's callable, given the item as a delayed_work.
template <class F>
struct delayed_call {
  F fn;
  void operator()(work& self);  // below, once delayed_work is complete
  callable_identity identity() const noexcept { return identity_of(fn); }
  explicit operator bool() const noexcept { return !is_empty_callable(fn); }
};
}  // namespace detail

// How a workqueue runs its items (the kernel's WQ_* flags and max_active).
struct wq_options {
  bool unbound = false;        // WQ_UNBOUND: any CPU of the affinity scope, no concurrency mgmt
  bool highpri = false;        // WQ_HIGHPRI: separate pools whose workers run at nice -20
  bool cpu_intensive = false;  // WQ_CPU_INTENSIVE: bound only; items do not count as running
  bool ordered = false;        // one at a time, strict FIFO (implies unbound, max_active 1)
  int max_active = 0;          // 0 = default (kernel: 1024), at most 2048
  affinity_scope scope = affinity_scope::cache;  // unbound only: cpu|smt|cache|numa|system
};

// A work item. Not copyable or movable (queues link it in place); it must outlive every
// queueing of it: destroying an item that is pending or running aborts the process with a
// message naming it, as the kernel's debugobjects would report it - except from its own
// function: as the kernel lets a work function free its work_struct, an item may destroy
// itself (`delete &self`, or its owner freed) as its function's last action, and the
// runtime does not touch it after the function returns (flush() and cancel_sync() of it
// from elsewhere are then the caller's race, as in the kernel). Destroying it after its
// function queued it again aborts.
//
// An item is used with one workqueue at a time (queueing it on a second workqueue while
// it is pending or running on the first is a bug, as in the kernel).
//
// The function is any callable invocable as fn(work&) - a plain function, a lambda, a
// std::function, or a move-only one (a lambda capturing a unique_ptr). It is held inside
// the item when it takes at most 48 bytes (a lambda capturing six pointers) and needs no more
// than a pointer's alignment, else on the heap; it is destroyed with the item. An empty one (a null
// pointer, an empty std::function) throws std::invalid_argument.
class work {
 public:
  // The item's name (for stats, traces and watchdog reports) is the demangled name of the
  // function where it can be found (a plain function), else of the callable's type.
  template <detail::item_function<work> F>
  explicit work(F&& fn)
      : fn_(std::forward<F>(fn)), name_(&detail::name_of_function(fn_)), state_(name_->c_str()) {}
  // An explicit name, e.g. "key_garbage_collector".
  template <detail::item_function<work> F>
  work(std::string_view name, F&& fn)
      : fn_(std::forward<F>(fn)), name_(&detail::name_item(name, fn_)), state_(name_->c_str()) {}
  // For workqueue::post: `name` is interned already.
  template <class F>
  work(detail::posted_tag, const std::string& name, F&& fn)
      : fn_(std::forward<F>(fn)), name_(&name), state_(name.c_str()) {}
  work(const work&) = delete;
  work& operator=(const work&) = delete;
  virtual ~work();

  // True while queued (or, for delayed work, while its timer is armed) and not yet started.
  bool pending() const noexcept;
  // Waits until the last instance queued before the call has finished running (or was
  // cancelled). Returns true if it had to wait, false if the item was idle. Must not be
  // called from the item's own function (it would wait for itself).
  bool flush();
  // Dequeues the item if it is pending (also stopping a delayed item's timer). Returns true
  // if it was pending. Never waits: while a cancel_sync() of the item is in progress it
  // returns false at once.
  bool cancel();
  // cancel(), then waits for a running instance to finish. Meanwhile the item is disabled:
  // queueing it (also from its own function) returns false, mod_delayed() returns true,
  // both without queueing. Returns true if the item was pending. Several cancel_sync()
  // calls may wait at once; the item is enabled again when the last returns.
  bool cancel_sync();

  const std::string& name() const noexcept { return *name_; }

 private:
  friend struct detail::wq_access;

  // The kernel's work_struct is a function, a data word and a list entry; here the last
  // two (and the pool's bookkeeping for an instance) are one detail::work_state.
  detail::work_fn<work> fn_;  // I
  const std::string* name_;   // I: interned, lives as long as the process
  detail::work_state state_;  // see quiesce/detail/work_state.hpp
};

// A work item that can be queued after a delay. One timer thread serves the whole process.
// Its function is given the item as a delayed_work, so that periodic work re-arms itself
// with wq.mod_delayed(self, period) (a function taking work& is accepted too).
class delayed_work : public work {
 public:
  template <detail::item_function<delayed_work> F>
  explicit delayed_work(F&& fn)
      : work(detail::delayed_call<std::decay_t<F>>{std::forward<F>(fn)}) {}
  template <detail::item_function<delayed_work> F>
  delayed_work(std::string_view name, F&& fn)
      : work(name, detail::delayed_call<std::decay_t<F>>{std::forward<F>(fn)}) {}
  template <class F>
  delayed_work(detail::posted_tag tag, const std::string& name, F&& fn)
      : work(tag, name, std::forward<F>(fn)) {}
};

template <class F>
void detail::delayed_call<F>::operator()(work& self) {
  std::invoke(fn, static_cast<delayed_work&>(self));
}

// Counters and latency histograms of one workqueue (all pools it uses).
struct wq_stats {
  std::string name;
  bool unbound = false;           // wq_options::unbound
  std::uint64_t queued = 0;       // queue() calls that returned true (incl. delayed, on firing)
  std::uint64_t executed = 0;     // executions finished
  std::uint64_t cancelled = 0;    // pending instances removed by cancel
  std::uint64_t exceptions = 0;   // executions that threw
  std::uint64_t hog_reports = 0;  // executions the watchdog marked CPU-intensive
  std::uint64_t rejected = 0;     // queueing refused (draining and not chained, or exiting)
  std::uint64_t dropped = 0;      // queued instances dropped, not run, at process exit
  std::uint64_t flushes = 0;      // flush() calls (incl. drain's) that have begun to wait
  // Times a queue() caller gave its CPU up (sched_yield) because every active slot was taken:
  // once per 16 such queueings of one thread (backpressure: the queue is max_active items
  // ahead of its workers, and a queuer adding more only takes CPU time from them).
  std::uint64_t backlog_yields = 0;
  bool draining = false;        // a drain() (or the destructor) is in progress
  int max_active = 0;           // the effective limit (per CPU for bound queues)
  int peak_active = 0;          // the most items ever active at once in one domain
  histogram queue_to_start_ns;  // queued -> execution started
  histogram run_ns;             // execution time (wall clock)
  // Scheduler view of the workers of the pools this queue uses (summed over workers alive
  // now): time runnable but waiting for a CPU is run_delay_ns. Zero if schedstat is absent.
  sched_sample workers;
};

// What one worker pool looks like now (for tests, reports and watchdog dumps).
struct pool_info {
  int id = 0;
  std::string cpus;  // cpulist
  int node = 0;
  bool bound = true;  // a per-CPU pool
  int nice = 0;
  unsigned flags = 0;  // the kernel's POOL_* flags (POOL_DISASSOCIATED 0x4 when unbound)
  int nr_workers = 0;
  int nr_idle = 0;
  int nr_running = 0;          // bound pools: workers counted as running
  std::size_t nr_pending = 0;  // items on the worklist
};

class workqueue {
 public:
  // Throws std::invalid_argument naming the option if options conflict (cpu_intensive with
  // unbound, max_active outside 0..2048).
  explicit workqueue(std::string name, wq_options options = {});
  // Drains (every item queued before, and every item they chain-queue, runs), then
  // detaches from its pools. Must not be called from one of its own work items. At
  // process exit, after quiesce's exit hook, it does not wait (see the exit rules).
  ~workqueue();
  workqueue(const workqueue&) = delete;
  workqueue& operator=(const workqueue&) = delete;

  // Queues `w` on the pool of the calling thread's CPU (bound), or of its affinity scope
  // (unbound). False if `w` was already pending (nothing changes), or if the queue is
  // draining and the caller is not one of its own items. Never blocks; where every active
  // slot is taken (max_active items ahead of the workers), one such queueing in 16 of the
  // calling thread gives its CPU up with sched_yield() first (backpressure: the workers the
  // backlog waits on may need that CPU; counted in wq_stats::backlog_yields). So do queue_on,
  // post and post_on; a delayed item's queueing when due (on the timer thread) never does.
  bool queue(work& w);
  // Queues on the pool of `cpu` (bound) or of the scope group holding `cpu` (unbound).
  // Throws std::invalid_argument if `cpu` is not usable by this process.
  bool queue_on(int cpu, work& w);
  // Queues after `delay` (0 = now; nanoseconds::max() = never, until mod_delayed, flush or
  // cancel). False if already pending, disabled, or refused as queue() is (a draining queue
  // refuses delayed work from outside too). Negative delays throw.
  bool queue_delayed(delayed_work& w, std::chrono::nanoseconds delay);
  bool queue_delayed_on(int cpu, delayed_work& w, std::chrono::nanoseconds delay);
  // Sets the delay whatever the state: a pending item is taken back (from its timer or
  // its queue) and queued again after `delay`. Returns false exactly when this call created
  // a new instance: true if the pending instance was moved, and true (nothing changes) if
  // the call is refused - a cancel_sync() of the item is in progress, the queue is draining
  // and the caller is not one of its items, or the process is exiting (kernel <= 6.9:
  // -ENOENT becomes true).
  bool mod_delayed(delayed_work& w, std::chrono::nanoseconds delay);

  // Fire and forget: runs `fn()` once, as a work item of its own that this queue creates,
  // queues (as queue(), queue_on() and queue_delayed() would) and destroys after `fn`
  // returns or throws (a throw is counted and reported as any item's). `fn` may be
  // move-only; it is moved into the item (held in place up to 48 bytes) and destroyed with
  // it. The item's memory comes from a free list per CPU (nodes a worker frees go back to
  // its CPU's list; a thread's cached nodes return to them when it exits): a post allocates
  // nothing once the lists hold as many nodes as were ever in flight at once. Nodes that
  // stay unused go back to the system (trim_posted_memory() below).
  // Returns false, destroying `fn` unrun, if the queue refuses new work (draining and the
  // caller is not one of its items, or the process is exiting). Items posted and still
  // queued at process exit are dropped without running or destroying `fn` (exit rules).
  // The item is named after fn's type in stats, traces and watchdog reports; it cannot be
  // cancelled or flushed on its own - flush() or drain() the queue.
  // Throws as the queue call would (std::invalid_argument for a cpu or delay it refuses,
  // std::logic_error in a forked child), std::invalid_argument for an empty `fn`, or
  // std::bad_alloc; `fn` is destroyed then too.
  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  & > bool post(F&& fn) {
    return post_as(-1, std::chrono::nanoseconds::zero(), std::forward<F>(fn));
  }
  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  & > bool post_on(int cpu, F&& fn) {
    return post_as(cpu, std::chrono::nanoseconds::zero(), std::forward<F>(fn));
  }
  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  & > bool post_delayed(F&& fn, std::chrono::nanoseconds delay) {
    return post_as(-1, delay, std::forward<F>(fn));
  }

  // post(), with a result: the returned future holds fn's value or the exception it threw.
  // If the queue refuses the item, the future's get() throws std::future_error
  // (broken_promise). An item dropped at process exit is neither run nor destroyed (post's
  // exit rule), so its future never becomes ready: code that runs at exit (a static's
  // destructor) must not wait for one. Waiting on the future from a work item of a
  // per-CPU queue does not release the CPU to the pool's other items: wait inside a
  // may_block scope, or chain the next step as another item. (A std::future, not a new
  // type: it is what C++ users already wait on, and its shared state is one allocation.)
  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  & > auto submit(F&& fn) -> std::future<std::invoke_result_t<std::decay_t<F>&>> {
    std::packaged_task<std::invoke_result_t<std::decay_t<F>&>()> task(std::forward<F>(fn));
    auto result = task.get_future();
    post(std::move(task));
    return result;
  }

  // Waits until every item queued before the call has finished; items queued after the
  // call are not waited for. Must not be called from this queue's own items.
  void flush();
  // Flushes until the queue is empty: no instance queued, running or armed on the timer
  // (checked in one step, so a timer firing into the queue cannot slip past). Meanwhile
  // only this queue's own items may queue on it (chained queueing); other queue(),
  // queue_delayed() and mod_delayed() calls are refused. Warns through the log sink
  // ("isn't complete after N tries") at 10 tries, then every 100. Must not be called from
  // this queue's own items (std::logic_error, and the queue is not left draining).
  void drain();

  wq_stats stats() const;
  const std::string& name() const noexcept;
  const wq_options& options() const noexcept;
  // True if the calling thread is a worker executing a work item queued on this queue (an
  // item that queueing calls "chained"). Lets code that waits for its own work on this
  // queue refuse to do so from the queue's items when they would deadlock (ordered or
  // max_active 1). Reads only the calling worker's own state: no lock, no allocation.
  bool in_own_item() const noexcept;

 private:
  friend struct detail::wq_access;

  template <class F>
  bool post_as(int cpu, std::chrono::nanoseconds delay, F&& fn) {
    using D = std::decay_t<F>;
    if (detail::is_empty_callable(fn)) throw std::invalid_argument("fn: nothing to post");
    void* memory = detail::posted_alloc("workqueue::post");
    delayed_work* node = nullptr;
    try {
      node = ::new (memory) delayed_work(detail::posted_tag{}, detail::posted_name_of<D>(),
                                         detail::posted_call<D>{std::forward<F>(fn)});
    } catch (...) {
      detail::posted_free(memory);
      throw;
    }
    return detail::posted_queue(*this, cpu, *node, delay);
  }

  // Owned: deleted by the destructor, except at process exit, when running items may still
  // reach it through this object, so the destructor leaves it (and this pointer) untouched.
  // (Not a unique_ptr: its destructor would write the pointer those items read.)
  detail::wq_impl* const impl_;
};

// The system's shared queues (kernel: system_wq, system_highpri_wq, system_unbound_wq,
// system_long_wq). Created on first use; never destroyed (see the exit rules above).
workqueue& system_wq();
workqueue& system_highpri_wq();
workqueue& system_unbound_wq();
workqueue& system_long_wq();

// The memory behind workqueue::post's items: nodes carved from slabs of 32 and kept on
// free lists, shared by all threads (plus each thread's cache of up to 64 nodes).
struct posted_memory {
  std::size_t node_bytes = 0;  // one posted item's node
  std::size_t slab_bytes = 0;  // taken from the allocator for nodes and not given back
  std::size_t free_nodes = 0;  // nodes on the shared free lists now
};
// What that memory is now (counts, read without a lock). Safe from any thread, a forked
// child's too.
posted_memory get_posted_memory() noexcept;
// Gives back to the allocator every slab whose nodes are all on the shared free lists and,
// with glibc, the freed pages to the system (malloc_trim): what a burst of posts left behind.
// Nodes in use or in a thread's cache are never given back, nor the slabs they are in.
// Returns the bytes given back. Posts meanwhile go on (one that finds the lists empty takes a
// new slab; one trim runs at a time). It also happens by itself (kernel: SLUB discarding
// empty slabs): while the shared lists hold more than 8,192 nodes, an item on a queue of the
// library's own ("posted_trim", unbound) looks every second and gives back the whole slabs
// among the nodes no post took since its last look, keeping 2,048 of those for the next
// posts. malloc_trim is process-wide: it walks every malloc arena, each under its lock.
// Throws std::logic_error in a forked child, or std::bad_alloc (then nothing was given back).
std::size_t trim_posted_memory();

// RAII: the calling work item is about to block (wait on a lock, I/O, a condition). On a
// per-CPU pool its worker stops counting as running, so another worker may start the
// pool's pending items - the user-space form of the kernel's scheduler hook. Nesting is
// allowed. On any thread it is also an RCU Tasks quiescent state for its scope: it is an
// rcu_voluntary_block, and every voluntary block (quiesce's own waits included) on a
// worker does the same. Costs one pool lock round trip on a worker.
class may_block {
 public:
  may_block() noexcept = default;
  may_block(const may_block&) = delete;
  may_block& operator=(const may_block&) = delete;

 private:
  rcu_voluntary_block block_;
};

// The pools that exist now.
std::vector<pool_info> worker_pools();

// The stats of every workqueue alive now (constructed, not yet destroyed; the system
// queues once first used), in the order they were created - what the kernel's
// tools/workqueue/wq_monitor.py lists. Throws std::logic_error in a forked child.
std::vector<wq_stats> all_workqueue_stats();

// How long an idle worker is kept before it may be culled (kernel: IDLE_WORKER_TIMEOUT,
// 300 s). Workers are culled only while too many are idle: nr_idle > 2 and
// (nr_idle - 2) * 4 >= nr_busy. Applies at once, to workers already idle too;
// nanoseconds::max() keeps idle workers for ever. Throws std::invalid_argument if not
// positive.
void set_worker_idle_timeout(std::chrono::nanoseconds timeout);

// The work item the calling thread is executing, or nullptr if it is not a worker or is
// between items.
work* current_work() noexcept;

}  // namespace quiesce
