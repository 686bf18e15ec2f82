// SPDX-License-Identifier: Apache-2.0
// Workqueues: a queue's presence in the pools (pwqs, max_active domains), its stats, and
// the system queues.
#include "quiesce/workqueue.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "../base/never_destroyed.hpp"
#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/trace.hpp"

namespace quiesce {

namespace detail {

namespace {

wq_options normalised(wq_options opt) {
  if (opt.max_active < 0 || opt.max_active > wq_max_active) {
    throw std::invalid_argument(
        fmt::format("wq_options.max_active: {} is outside 0..{}", opt.max_active, wq_max_active));
  }
  if (opt.ordered) {
    if (opt.max_active > 1) {
      throw std::invalid_argument("wq_options.max_active: an ordered queue runs one at a time");
    }
    opt.unbound = true;
    opt.max_active = 1;
    opt.scope = affinity_scope::system;  // one pool, one FIFO
  }
  if (opt.cpu_intensive && opt.unbound) {
    throw std::invalid_argument(
        "wq_options.cpu_intensive: only per-CPU (bound) queues have concurrency management");
  }
  if (opt.max_active == 0) opt.max_active = wq_dfl_active;
  return opt;
}

int cpu_count(const cpu_set& s) {
  return static_cast<int>(s.size());
}

}  // namespace

wq_impl::wq_impl(std::string name_, const wq_options& opt_)
    : name(std::move(name_)),
      opt(normalised(opt_)),
      max_active(opt.max_active),
      trace_name(trace::intern(name)) {
  if (name.empty()) throw std::invalid_argument("name: a workqueue needs a name");
  const cpu_topology& topo = system_topology();
  int max_cpu = 0;
  for (int cpu : topo.cpus())
    max_cpu = std::max(max_cpu, cpu);
  pwq_index_of_cpu.assign(static_cast<std::size_t>(max_cpu) + 1, -1);

  if (!opt.unbound) {
    // Per-CPU: max_active applies per CPU, so each pwq has its own domain.
    for (int cpu : topo.cpus()) {
      pool& p = bound_pool(cpu, opt.highpri);
      domains.push_back(std::make_unique<active_domain>(max_active));
      pwqs.push_back(std::make_unique<pwq>(this, &p, domains.back().get()));
      pwq_index_of_cpu[static_cast<std::size_t>(cpu)] = static_cast<int>(pwqs.size()) - 1;
    }
    return;
  }
  // Unbound: max_active is system-wide, split across NUMA nodes by their share of CPUs,
  // each node at least min(max_active, 8) (kernel: wq_update_node_max_active). A group of
  // the scope that spans nodes (system scope on a NUMA machine) uses one global domain.
  const int total = cpu_count(topo.cpus());
  const auto& nodes = topo.groups(affinity_scope::numa);
  const auto& groups = topo.groups(opt.scope);
  std::vector<int> domain_of_group;  // node index, or nodes.size() for the global domain
  for (const cpu_set& group : groups) {
    int index = static_cast<int>(nodes.size());
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      if (group.intersect(nodes[n]) == group) index = static_cast<int>(n);
    }
    domain_of_group.push_back(index);
  }
  std::vector<pool*> group_pool;
  for (const cpu_set& group : groups) {
    group_pool.push_back(&unbound_pool(group, topo.node_of(group.first()), opt.highpri));
  }
  std::vector<active_domain*> domain_at(nodes.size() + 1, nullptr);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto index = static_cast<std::size_t>(domain_of_group[g]);
    if (!domain_at[index]) {
      int limit = max_active;
      if (index < nodes.size()) {
        const int share = (max_active * cpu_count(nodes[index]) + total - 1) / total;
        limit = std::min(max_active, std::max(std::min(max_active, wq_dfl_min_active), share));
      }
      domains.push_back(std::make_unique<active_domain>(limit));
      domain_at[index] = domains.back().get();
    }
    pwqs.push_back(std::make_unique<pwq>(this, group_pool[g], domain_at[index]));
    for (int cpu : groups[g]) {
      pwq_index_of_cpu[static_cast<std::size_t>(cpu)] = static_cast<int>(pwqs.size()) - 1;
    }
  }
}

pwq& wq_impl::pwq_for_cpu(int cpu) {
  if (cpu < 0) cpu = sched_getcpu();
  if (cpu >= 0 && static_cast<std::size_t>(cpu) < pwq_index_of_cpu.size()) {
    const int index = pwq_index_of_cpu[static_cast<std::size_t>(cpu)];
    if (index >= 0) return *pwqs[static_cast<std::size_t>(index)];
  }
  return *pwqs.front();  // running on a CPU outside the topology (affinity changed)
}

pwq* wq_impl::pwq_in_pool(const pool* p) noexcept {
  for (auto& q : pwqs) {
    if (q->pool == p) return q.get();
  }
  return nullptr;
}

bool wq_impl::in_flight() const noexcept {
  for (const auto& q : pwqs) {
    if (q->any_in_flight(0) || q->any_in_flight(1)) {
      return true;
    }
  }
  return false;
}

}  // namespace detail

using detail::state_of;
using detail::wq_access;

namespace {
std::string checked_name(std::string name) {
  detail::refuse_in_forked_child("workqueue");
  return name;
}
}  // namespace

namespace {

// Every queue alive (constructed and not yet destroyed), for all_workqueue_stats(). Lock
// order: this lock, then pool and domain locks (stats_of); nothing takes it under them.
struct live_queues {
  detail::mutex lock;
  std::vector<const detail::wq_impl*> queues QUIESCE_GUARDED_BY(lock);
};
live_queues& live() {
  static detail::never_destroyed<live_queues> l;
  return l.get();
}

wq_stats stats_of(const detail::wq_impl& wq);

}  // namespace

workqueue::workqueue(std::string name, wq_options options)
    : impl_(std::make_unique<detail::wq_impl>(checked_name(std::move(name)), options).release()) {
  try {
    live_queues& l = live();
    detail::lock_guard guard(l.lock);
    l.queues.push_back(impl_);
  } catch (...) {
    delete impl_;  // a constructor that throws runs no destructor
    throw;
  }
  detail::number_queue(*impl_);  // the last step: construction has completed
}

workqueue::~workqueue() {
  if (impl_->system) return;
  if (detail::in_forked_child()) return;  // no worker here: nothing to drain, nothing freed
  const auto forget = [this] {
    live_queues& l = live();
    detail::lock_guard guard(l.lock);
    std::erase(l.queues, impl_);
  };
  // At exit nothing waits for user code: what is queued is being dropped, and a running
  // item may be waiting for a static object destroyed after us. The queue's state stays.
  if (detail::process_exiting()) {
    forget();
    detail::keep_until_exit(impl_);
    return;
  }
  drain();
  forget();  // its stats were listed while it drained
  delete impl_;
}

namespace detail {

std::atomic<int> domains_waiting{0};

void active_domain::count_waiting(int delta) noexcept {
  const int was = nr_inactive.fetch_add(delta, std::memory_order_seq_cst);
  if (was == 0 && delta > 0) domains_waiting.fetch_add(1, std::memory_order_seq_cst);
  if (was + delta == 0 && delta < 0) domains_waiting.fetch_sub(1, std::memory_order_seq_cst);
}

namespace {

// In every live queue, activates the items waiting in each domain `wanted` picks (looked at
// without its lock: the common case costs none) - while slots are free, or all of them
// `past_limit`.
template <class Wanted>
void activate_waiting(Wanted wanted, bool past_limit) {
  live_queues& l = live();
  detail::lock_guard guard(l.lock);
  for (const wq_impl* wq : l.queues) {
    for (const auto& d : wq->domains) {
      if (!wanted(*d)) continue;
      work_list taken;
      {
        detail::lock_guard domain_guard(d->lock);
        take_inactive_locked(*d, taken, nullptr, past_limit);
      }
      activate_taken(taken);
    }
  }
}

}  // namespace

void activate_stranded() {
  if (mutant::stranded_not_swept) return;
  if (domains_waiting.load(std::memory_order_seq_cst) == 0) return;  // the common case
  activate_waiting([](const active_domain& d) { return d.stranded(); }, false);
}

void activate_all_inactive() {
  if (mutant::exit_leaves_inactive) return;
  activate_waiting(
      [](const active_domain& d) { return d.nr_inactive.load(std::memory_order_seq_cst) > 0; },
      /*past_limit=*/true);
}

}  // namespace detail

std::vector<wq_stats> all_workqueue_stats() {
  detail::refuse_in_forked_child("all_workqueue_stats");
  std::vector<wq_stats> all;
  live_queues& l = live();
  detail::lock_guard guard(l.lock);
  for (const detail::wq_impl* wq : l.queues)
    all.push_back(stats_of(*wq));
  return all;
}

const std::string& workqueue::name() const noexcept {
  return impl_->name;
}
const wq_options& workqueue::options() const noexcept {
  return impl_->opt;
}
bool workqueue::in_own_item() const noexcept {
  return detail::is_chained(*impl_);
}

wq_stats workqueue::stats() const {
  return stats_of(*impl_);
}

namespace {

wq_stats stats_of(const detail::wq_impl& wq) {
  wq_stats s;
  s.name = wq.name;
  s.unbound = wq.opt.unbound;
  s.cancelled = wq.cancelled.load(std::memory_order_relaxed);
  s.rejected = wq.rejected.load(std::memory_order_relaxed);
  s.backlog_yields = wq.backlog_yields.load(std::memory_order_relaxed);
  s.flushes = wq.flushes.load(std::memory_order_seq_cst);
  s.draining = wq.draining.load(std::memory_order_seq_cst) > 0;
  s.max_active = wq.max_active;
  std::set<detail::pool*> pools;
  for (auto& q : wq.pwqs) {
    detail::lock_guard guard(q->pool->lock);
    s.queue_to_start_ns.merge(q->queue_to_start_ns);
    s.run_ns.merge(q->run_ns);
    s.queued += q->queued.load(std::memory_order_relaxed);
    s.executed += q->executed;
    s.exceptions += q->exceptions;
    s.dropped += q->dropped;
    s.hog_reports += q->hogs;
    pools.insert(q->pool);
  }
  for (auto& d : wq.domains)
    s.peak_active = std::max(s.peak_active, d->peak_active.load(std::memory_order_relaxed));
  for (detail::pool* p : pools) {
    detail::lock_guard guard(p->lock);
    s.workers += p->exited_sched;
    for (auto& w : p->workers) {
      w->pool->lock.assert_held();
      if (!w->sched) continue;
      if (auto sample = w->sched->sample()) s.workers += *sample;
    }
  }
  return s;
}

}  // namespace

namespace {

// The system queues live for the whole process: constructed in place and never destroyed,
// so items queued on them at exit never touch a destroyed queue.
using detail::never_destroyed;

workqueue& make_system(never_destroyed<workqueue>& slot) {
  wq_access::impl(slot.get()).system = true;
  return slot.get();
}

}  // namespace

workqueue& system_wq() {
  static never_destroyed<workqueue> wq("events");
  static workqueue& ref = make_system(wq);
  return ref;
}

workqueue& system_highpri_wq() {
  static never_destroyed<workqueue> wq("events_highpri", wq_options{.highpri = true});
  static workqueue& ref = make_system(wq);
  return ref;
}

workqueue& system_unbound_wq() {
  static never_destroyed<workqueue> wq(
      "events_unbound", wq_options{.unbound = true, .max_active = detail::wq_max_active});
  static workqueue& ref = make_system(wq);
  return ref;
}

workqueue& system_long_wq() {
  static never_destroyed<workqueue> wq("events_long");
  static workqueue& ref = make_system(wq);
  return ref;
}

}  // namespace quiesce
