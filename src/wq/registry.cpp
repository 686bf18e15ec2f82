// SPDX-License-Identifier: Apache-2.0
// The pool registry - every worker pool of the process - and process exit.
//
// Pools are process-lifetime objects that are never destroyed: workers, the timer and the
// watchdog may touch them until the process ends, also while static destructors run.
//
// Exit (the rules are stated in quiesce/workqueue.hpp): quiesce's exit hook, an atexit
// handler, marks every pool exiting. From then on queueing is refused, workers drop the
// items that are (or land) on their lists instead of running them, and the timer drops what
// it holds; running items finish on their workers. Nothing waits for a worker or joins one:
// the threads end with the process.
//
// Fork: a child forked once the registry exists has the pools but not their workers (nor
// the timer thread): every workqueue call there throws std::logic_error, a queue's
// destructor does nothing, and the exit hook does nothing.
#include <fmt/format.h>

#include <pthread.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>

#include "../base/mutex.hpp"
#include "../base/never_destroyed.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/topology.hpp"

namespace quiesce::detail {

std::atomic<bool> g_exiting{false};

namespace {

// Queues are numbered as their construction completes (number_queue).
std::atomic<std::uint64_t> g_completed_serial{0};  // A: acquire/release
// Set in a child forked after the registry existed (its workers are not in the child).
std::atomic<bool> g_forked_child{false};  // A: seq_cst

void mark_forked_child() noexcept {
  g_forked_child.store(true, std::memory_order_seq_cst);
}

class registry {
 public:
  registry() : topo_(system_topology()) {
    int id = 0;
    for (int highpri = 0; highpri < 2; ++highpri) {
      for (int cpu : topo_.cpus()) {
        bound_[highpri].emplace(cpu, std::make_unique<pool>(id++, cpu_set{cpu}, cpu,
                                                            topo_.node_of(cpu), highpri ? -20 : 0));
      }
    }
    next_pool_id_ = id;
    // From here on workers may exist, and a forked child would not have them.
    if (const int err = ::pthread_atfork(nullptr, nullptr, &mark_forked_child); err != 0) {
      throw std::system_error(err, std::generic_category(), "workqueue: pthread_atfork");
    }
    // The pools' timestamps are stat_ns() (clock.hpp): their ages are taken on that clock.
    watchdog_ = watchdog_register("workqueue", [this](std::uint64_t, const watchdog_config& c) {
      const std::vector<pool*> pools = all();
      wq_watchdog_check(pools, stat_ns(), c);
      retry_worker_creation(pools);
      activate_stranded();
    });
  }

  pool& bound(int cpu, bool highpri) {
    const auto it = bound_[highpri ? 1 : 0].find(cpu);
    if (it == bound_[highpri ? 1 : 0].end()) require_cpu_in(system_topology().cpus(), cpu, "cpu");
    return *it->second;
  }

  pool& unbound(const cpu_set& cpus, int node, bool highpri) {
    detail::lock_guard guard(unbound_lock_);
    auto& slot = unbound_[{cpus.to_string(), highpri}];
    if (!slot) {
      slot = std::make_unique<pool>(next_pool_id_++, cpus, -1, node, highpri ? -20 : 0);
      if (g_exiting.load(std::memory_order_seq_cst)) {
        lock_guard pool_guard(slot->lock);
        slot->exiting = true;
      }
    }
    return *slot;
  }

  std::vector<pool*> all() {
    std::vector<pool*> out;
    for (auto& m : bound_) {
      for (auto& [cpu, p] : m)
        out.push_back(p.get());
    }
    detail::lock_guard guard(unbound_lock_);
    for (auto& [key, p] : unbound_)
      out.push_back(p.get());
    return out;
  }  // The exit hook: refuse new work, drop what is queued and armed. Never blocks on a worker.
  void begin_exit() {
    if (in_forked_child()) return;  // the pools' locks may be held by threads not here
    if (g_exiting.exchange(true, std::memory_order_seq_cst)) return;
    std::vector<pool*> pools;
    {
      detail::lock_guard guard(unbound_lock_);  // a pool created from now on starts exiting
      pools = all_locked();
    }
    for (pool* p : pools) {
      detail::lock_guard guard(p->lock);
      p->exiting = true;
      kick_pool_locked(*p);  // a worker drops what is on the list
    }
    activate_all_inactive();  // and what waits for a slot (behind items that may never end)
    timer_drop_all();
  }

  // The exit hook must run before the destructor of every queue that has queued work (see
  // ensure_exit_hook). A hook registered after a queue's construction completed runs before
  // that queue's destructor ([basic.start.term]); one registration covers every queue whose
  // construction completed before it.
  void ensure_exit_hook(wq_impl& wq) {
    if (wq.serial <= covered_.load(std::memory_order_acquire)) return;
    detail::lock_guard guard(hook_lock_);
    if (wq.serial <= covered_.load(std::memory_order_relaxed)) return;
    const std::uint64_t completed = g_completed_serial.load(std::memory_order_acquire);
    if (std::atexit(+[] { the_registry().begin_exit(); }) != 0) {
      // No room for another handler: queues destroyed at exit before an earlier hook
      // runs drain as at any other time.
      return;
    }
    covered_.store(completed, std::memory_order_release);
  }

  static registry& the_registry() {
    static never_destroyed<registry> r;
    return r.get();
  }

 private:
  std::vector<pool*> all_locked() QUIESCE_REQUIRES(unbound_lock_) {
    std::vector<pool*> out;
    for (auto& m : bound_) {
      for (auto& [cpu, p] : m)
        out.push_back(p.get());
    }
    for (auto& [key, p] : unbound_)
      out.push_back(p.get());
    return out;
  }

  const cpu_topology& topo_;
  std::map<int, std::unique_ptr<pool>> bound_[2];  // I after construction: [highpri][cpu]
  detail::mutex unbound_lock_{"wq unbound pools lock"};
  std::map<std::pair<std::string, bool>, std::unique_ptr<pool>> unbound_
      QUIESCE_GUARDED_BY(unbound_lock_);
  int next_pool_id_ QUIESCE_GUARDED_BY(unbound_lock_) = 0;
  detail::mutex hook_lock_{"wq exit hook lock"};  // serialises exit hook registrations
  std::atomic<std::uint64_t> covered_{0};         // A: queues up to this serial precede the hook
  watchdog_registration watchdog_;                // I
};

}  // namespace

void number_queue(wq_impl& wq) noexcept {
  wq.serial = g_completed_serial.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void keep_until_exit(wq_impl* wq) {
  // Reachable from here, so leak checkers do not report it; never freed.
  static never_destroyed<std::pair<mutex, std::vector<wq_impl*>>> kept;
  lock_guard guard(kept.get().first);
  kept.get().second.push_back(wq);
}

pool& bound_pool(int cpu, bool highpri) {
  return registry::the_registry().bound(cpu, highpri);
}
pool& unbound_pool(const cpu_set& cpus, int node, bool highpri) {
  return registry::the_registry().unbound(cpus, node, highpri);
}
std::vector<pool*> all_pools() {
  return registry::the_registry().all();
}
bool in_forked_child() noexcept {
  return g_forked_child.load(std::memory_order_seq_cst);
}
void refuse_in_forked_child(const char* what) {
  if (!in_forked_child()) return;
  throw std::logic_error(fmt::format(
      "{}: this process is a fork() child of one that had started workqueues; their workers "
      "do not exist here, so no workqueue can be used in it (exec, or use them in the parent)",
      what));
}
void ensure_exit_hook(wq_impl& wq) {
  if (wq.exit_hook_checked.load(std::memory_order_relaxed)) return;
  if (process_exiting()) return;  // the hook has run; no registration during exit
  registry::the_registry().ensure_exit_hook(wq);
  wq.exit_hook_checked.store(true, std::memory_order_relaxed);
}

}  // namespace quiesce::detail

namespace quiesce {

std::vector<pool_info> worker_pools() {
  std::vector<pool_info> out;
  for (detail::pool* p : detail::all_pools()) {
    detail::lock_guard guard(p->lock);
    pool_info info;
    info.id = p->id;
    info.cpus = p->cpus.to_string();
    info.node = p->node;
    info.bound = p->bound();
    info.nice = p->nice;
    info.flags = p->flags();
    info.nr_workers = p->nr_workers;
    info.nr_idle = p->nr_idle;
    info.nr_running = p->running();
    info.nr_pending = detail::pending_count_locked(*p);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace quiesce
