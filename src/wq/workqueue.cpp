// Workqueues: queueing, max_active accounting, flush, drain and stats.
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

void trace_activate(work& item) {
  if (!trace::enabled()) return;
  trace::emit({.ts_ns = now_ns(),
               .name = trace::workqueue_activate_work,
               .category = "workqueue",
               .str_key = "function",
               .str_val = wq_access::trace_name(item),
               .num_key = "work",
               .num_val = reinterpret_cast<std::uintptr_t>(&item)});
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
      domains.push_back(std::make_unique<active_domain>(max_active, &p.lock));
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
      // A domain that serves a single pool shares its lock (as per-CPU queues do).
      const auto users =
          std::count(domain_of_group.begin(), domain_of_group.end(), domain_of_group[g]);
      domains.push_back(
          std::make_unique<active_domain>(limit, users == 1 ? &group_pool[g]->lock : nullptr));
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
    if (q->in_flight[0].load(std::memory_order_seq_cst) > 0 ||
        q->in_flight[1].load(std::memory_order_seq_cst) > 0) {
      return true;
    }
  }
  return false;
}

bool queue_work_owned(wq_impl& wq, int cpu, work& item, bool from_timer) {
  using A = wq_access;
  if (wq.draining.load(std::memory_order_seq_cst) > 0 && !from_timer) {
    // Only chained queueing (from this queue's own items) is allowed while draining.
    worker* me = this_thread_worker();
    const bool chained = me && me->current_pwq && me->current_pwq->wq == &wq;
    if (!chained) {
      wq.rejected.fetch_add(1, std::memory_order_relaxed);
      if (!wq.reject_reported.exchange(true)) {
        log(log_level::warning, fmt::format("workqueue {}: queueing {} while draining is refused",
                                            wq.name, item.name()));
      }
      A::pending_id(item).store(0, std::memory_order_seq_cst);
      A::flags(item).fetch_and(~work_pending, std::memory_order_seq_cst);
      notify_completion();
      return false;
    }
  }
  pwq* q = &wq.pwq_for_cpu(cpu);
  // Non-reentrancy: if the item is running on another pool, the new instance goes there
  // (kernel: __queue_work's last_pool check), so it cannot run on two workers at once.
  if (pool* last = A::last_pool(item).load(std::memory_order_acquire); last && last != q->pool) {
    std::lock_guard guard(last->lock);
    worker* running = A::current_worker(item);
    if (running && running->current == &item) {
      if (pwq* there = wq.pwq_in_pool(last)) q = there;
    }
  }
  const int color = q->color.load(std::memory_order_seq_cst);
  q->in_flight[color].fetch_add(1, std::memory_order_seq_cst);
  A::pwq_of(item) = q;
  A::color(item) = color;
  A::queued_ns(item) = now_ns();
  wq.queued.fetch_add(1, std::memory_order_relaxed);
  if (trace::enabled()) {
    trace::emit({.ts_ns = A::queued_ns(item),
                 .name = trace::workqueue_queue_work,
                 .category = "workqueue",
                 .str_key = "function",
                 .str_val = A::trace_name(item),
                 .str2_key = "workqueue",
                 .str2_val = wq.trace_name,
                 .num_key = "work",
                 .num_val = reinterpret_cast<std::uintptr_t>(&item)});
  }
  active_domain& d = *q->domain;
  std::unique_lock domain_guard(d.lock);  // for a per-CPU queue, this is the pool lock
  if (d.nr_active < d.max_active) {
    ++d.nr_active;
    d.peak_active = std::max(d.peak_active, d.nr_active);
    A::active(item) = true;
    trace_activate(item);  // the kernel traces immediate activation too
    // Activated at once: the queueing time is the activation time (one clock read less).
    if (d.shares_pool_lock) {
      insert_work_locked(*q->pool, item, A::queued_ns(item));
    } else {
      std::lock_guard pool_guard(q->pool->lock);
      insert_work_locked(*q->pool, item, A::queued_ns(item));
    }
  } else {
    A::active(item) = false;
    d.inactive.push_back(&item);
    A::inactive_in(item).store(&d, std::memory_order_release);  // re-checked under d.lock
  }
  return true;
}

namespace {

// Takes one active slot back and activates the oldest inactive items the limit now allows
// (kernel: pwq_dec_nr_active). d.lock held; pool locks taken as needed unless shared.
void dec_nr_active_locked(active_domain& d) {
  using A = wq_access;
  --d.nr_active;
  while (d.nr_active < d.max_active) {
    work* next = d.inactive.pop_front();
    if (!next) break;
    A::inactive_in(*next).store(nullptr, std::memory_order_release);
    A::active(*next) = true;
    ++d.nr_active;
    d.peak_active = std::max(d.peak_active, d.nr_active);
    pool& p = *A::pwq_of(*next)->pool;
    trace_activate(*next);
    const std::uint64_t now = now_ns();
    if (d.shares_pool_lock) {
      insert_work_locked(p, *next, now);
    } else {
      std::lock_guard pool_guard(p.lock);
      insert_work_locked(p, *next, now);
    }
  }
}

}  // namespace

void pwq_dec_nr_in_flight_locked(pwq& q, int color, bool active) {
  if (active) dec_nr_active_locked(*q.domain);
  q.in_flight[color].fetch_sub(1, std::memory_order_seq_cst);  // last touch of q
  notify_completion();
}

void pwq_dec_nr_in_flight(pwq& q, int color, bool active) {
  if (active) {
    std::lock_guard domain_guard(q.domain->lock);
    dec_nr_active_locked(*q.domain);
  }
  q.in_flight[color].fetch_sub(1, std::memory_order_seq_cst);  // last touch of q
  notify_completion();
}

}  // namespace detail

using detail::wq_access;

workqueue::workqueue(std::string name, wq_options options)
    : impl_(std::make_unique<detail::wq_impl>(std::move(name), options)) {}

workqueue::~workqueue() {
  if (!impl_->system) drain();
}

const std::string& workqueue::name() const noexcept {
  return impl_->name;
}
const wq_options& workqueue::options() const noexcept {
  return impl_->opt;
}

namespace {

void check_cpu(int cpu) {
  if (!system_topology().cpus().contains(cpu)) {
    throw std::invalid_argument(fmt::format("cpu: {} is not usable by this process (usable: {})",
                                            cpu, system_topology().cpus().to_string()));
  }
}

// Takes the pending bit for a new instance; false if the item is already pending.
bool claim_for_queueing(work& w) {
  if (wq_access::flags(w).fetch_or(detail::work_pending, std::memory_order_seq_cst) &
      detail::work_pending) {
    return false;
  }
  const std::uint64_t id = wq_access::last_id(w).fetch_add(1, std::memory_order_seq_cst) + 1;
  wq_access::pending_id(w).store(id, std::memory_order_release);
  return true;
}

void check_delay(std::chrono::nanoseconds delay) {
  if (delay < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument(fmt::format("delay: {} ns is negative", delay.count()));
  }
}

// Queues now or arms the timer, for an item whose pending bit the caller owns.
bool queue_or_arm(workqueue& wq, int cpu, delayed_work& w, std::chrono::nanoseconds delay) {
  detail::wq_impl& impl = wq_access::impl(wq);
  if (delay == std::chrono::nanoseconds::zero()) {
    return detail::queue_work_owned(impl, cpu, w, /*from_timer=*/false);
  }
  impl.timers_armed.fetch_add(1, std::memory_order_seq_cst);
  detail::timer_arm(w, wq, cpu, now_ns() + static_cast<std::uint64_t>(delay.count()));
  return true;
}

}  // namespace

bool workqueue::queue(work& w) {
  if (!claim_for_queueing(w)) return false;
  return detail::queue_work_owned(*impl_, -1, w, /*from_timer=*/false);
}

bool workqueue::queue_on(int cpu, work& w) {
  check_cpu(cpu);
  if (!claim_for_queueing(w)) return false;
  return detail::queue_work_owned(*impl_, cpu, w, /*from_timer=*/false);
}

bool workqueue::queue_delayed(delayed_work& w, std::chrono::nanoseconds delay) {
  check_delay(delay);
  if (!claim_for_queueing(w)) return false;
  return queue_or_arm(*this, -1, w, delay);
}

bool workqueue::queue_delayed_on(int cpu, delayed_work& w, std::chrono::nanoseconds delay) {
  check_cpu(cpu);
  check_delay(delay);
  if (!claim_for_queueing(w)) return false;
  return queue_or_arm(*this, cpu, w, delay);
}

bool workqueue::mod_delayed(delayed_work& w, std::chrono::nanoseconds delay) {
  check_delay(delay);
  const bool was_pending = detail::grab_pending(w, /*count_cancel=*/false);
  if (!was_pending) {
    const std::uint64_t id = wq_access::last_id(w).fetch_add(1, std::memory_order_seq_cst) + 1;
    wq_access::pending_id(w).store(id, std::memory_order_seq_cst);
  }
  queue_or_arm(*this, -1, w, delay);
  return was_pending;
}

void workqueue::flush() {
  detail::worker* me = detail::this_thread_worker();
  if (me && me->current_pwq && me->current_pwq->wq == impl_.get()) {
    throw std::logic_error("workqueue::flush: " + impl_->name + " flushed from its own item");
  }
  std::lock_guard guard(impl_->flush_mutex);
  // Flip every pwq's color: items queued from now on get the other color, and we wait for
  // the old one to drain (kernel: flush colors). Flushers are serialised, so two colors do.
  std::vector<int> flushing;
  for (auto& q : impl_->pwqs)
    flushing.push_back(q->color.fetch_xor(1, std::memory_order_seq_cst));
  impl_->flushes.fetch_add(1, std::memory_order_seq_cst);
  detail::wait_for_completion([&] {
    for (std::size_t i = 0; i < impl_->pwqs.size(); ++i) {
      if (impl_->pwqs[i]->in_flight[flushing[i]].load(std::memory_order_seq_cst) > 0) return false;
    }
    return true;
  });
}

void workqueue::drain() {
  impl_->draining.fetch_add(1, std::memory_order_seq_cst);
  for (unsigned tries = 0;;) {
    flush();
    if (!impl_->in_flight()) {
      if (impl_->timers_armed.load(std::memory_order_seq_cst) == 0) break;
      // Only delayed items remain: wait for a timer to fire (or be cancelled).
      detail::wait_for_completion([&] {
        return impl_->timers_armed.load(std::memory_order_seq_cst) == 0 || impl_->in_flight();
      });
      continue;
    }
    ++tries;  // chained queueing kept the queue busy through a whole flush
    if (tries == 10 || (tries % 100 == 0 && tries <= 1000)) {
      log(log_level::warning,
          fmt::format("workqueue {}: drain() isn't complete after {} tries", impl_->name, tries));
    }
  }
  impl_->draining.fetch_sub(1, std::memory_order_seq_cst);
}

wq_stats workqueue::stats() const {
  wq_stats s;
  s.name = impl_->name;
  s.queued = impl_->queued.load(std::memory_order_relaxed);
  s.cancelled = impl_->cancelled.load(std::memory_order_relaxed);
  s.rejected = impl_->rejected.load(std::memory_order_relaxed);
  s.flushes = impl_->flushes.load(std::memory_order_seq_cst);
  s.draining = impl_->draining.load(std::memory_order_seq_cst) > 0;
  s.max_active = impl_->max_active;
  std::set<detail::pool*> pools;
  for (auto& q : impl_->pwqs) {
    std::lock_guard guard(q->pool->lock);
    s.queue_to_start_ns.merge(q->queue_to_start_ns);
    s.run_ns.merge(q->run_ns);
    s.executed += q->executed;
    s.exceptions += q->exceptions;
    s.hog_reports += q->hogs;
    pools.insert(q->pool);
  }
  for (auto& d : impl_->domains) {
    std::lock_guard guard(d->lock);
    s.peak_active = std::max(s.peak_active, d->peak_active);
  }
  for (detail::pool* p : pools) {
    std::lock_guard guard(p->lock);
    s.workers.run_ns += p->exited_sched.run_ns;
    s.workers.run_delay_ns += p->exited_sched.run_delay_ns;
    s.workers.switches += p->exited_sched.switches;
    for (auto& w : p->workers) {
      if (!w->sched) continue;
      if (auto sample = w->sched->sample()) {
        s.workers.run_ns += sample->run_ns;
        s.workers.run_delay_ns += sample->run_delay_ns;
        s.workers.switches += sample->switches;
      }
    }
  }
  return s;
}

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
