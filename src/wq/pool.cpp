// Worker pools and their workers: the kernel's worker_thread(), process_one_work() and
// concurrency management, for user space.
#include <cxxabi.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <map>
#include <stdexcept>

#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/trace.hpp"

namespace quiesce::detail {

namespace {

thread_local worker* tls_worker = nullptr;

std::atomic<std::int64_t> g_idle_timeout_ns{300'000'000'000};  // A: IDLE_WORKER_TIMEOUT

// The process's pools. Bound pools exist from the start (workers are created on demand);
// unbound pools are created on first use by a queue of their scope.
class runtime {
 public:
  runtime() : topo_(system_topology()) {
    int id = 0;
    for (int highpri = 0; highpri < 2; ++highpri) {
      for (int cpu : topo_.cpus()) {
        bound_[highpri].emplace(cpu, std::make_unique<pool>(id++, cpu_set{cpu}, cpu,
                                                            topo_.node_of(cpu), highpri ? -20 : 0));
      }
    }
    next_pool_id_ = id;
    watchdog_ = watchdog_register("workqueue", [this](std::uint64_t now, const watchdog_config& c) {
      wq_watchdog_check(all(), now, c);
    });
  }

  // Stops every worker: each finishes the item it is running; items still queued are not
  // run (the process is exiting).
  ~runtime() {
    watchdog_ = watchdog_registration();  // no check runs from here on
    std::vector<pool*> pools = all();
    for (pool* p : pools) {
      std::lock_guard guard(p->lock);
      p->stopping = true;
      for (auto& w : p->workers)
        w->wake.notify_one();
    }
    for (pool* p : pools) {
      std::vector<std::unique_ptr<worker>> workers;
      {
        std::lock_guard guard(p->lock);
        workers = std::move(p->workers);
        for (auto& w : p->dying)
          workers.push_back(std::move(w));
        p->dying.clear();
      }
      for (auto& w : workers) {
        if (w->thread.joinable()) w->thread.join();
        if (w->stat_fd >= 0) ::close(w->stat_fd);
      }
    }
  }

  pool& bound(int cpu, bool highpri) {
    const auto it = bound_[highpri ? 1 : 0].find(cpu);
    if (it == bound_[highpri ? 1 : 0].end()) {
      throw std::invalid_argument(fmt::format("cpu: {} is not usable by this process", cpu));
    }
    return *it->second;
  }

  pool& unbound(const cpu_set& cpus, int node, bool highpri) {
    std::lock_guard guard(unbound_lock_);
    auto& slot = unbound_[{cpus.to_string(), highpri}];
    if (!slot) slot = std::make_unique<pool>(next_pool_id_++, cpus, -1, node, highpri ? -20 : 0);
    return *slot;
  }

  std::vector<pool*> all() {
    std::vector<pool*> out;
    for (auto& m : bound_) {
      for (auto& [cpu, p] : m)
        out.push_back(p.get());
    }
    std::lock_guard guard(unbound_lock_);
    for (auto& [key, p] : unbound_)
      out.push_back(p.get());
    return out;
  }

 private:
  const cpu_topology& topo_;
  std::map<int, std::unique_ptr<pool>> bound_[2];  // I after construction: [highpri][cpu]
  std::mutex unbound_lock_;
  std::map<std::pair<std::string, bool>, std::unique_ptr<pool>> unbound_;  // L(unbound_lock_)
  int next_pool_id_ = 0;                                                   // L(unbound_lock_)
  watchdog_registration watchdog_;                                         // I
};

runtime& rt() {
  static runtime r;
  return r;
}

std::string worker_name(const pool& p, int id) {
  if (p.bound()) return fmt::format("kworker/{}:{}{}", p.cpu, id, p.nice < 0 ? "H" : "");
  return fmt::format("kworker/u{}:{}{}", p.id, id, p.nice < 0 ? "H" : "");
}

void worker_main(worker* w);

// Starts a new worker in `p` (L). It begins busy-less and not idle: it will look for work.
bool create_worker_locked(pool& p) {
  if (p.nr_workers >= max_workers_per_pool) {
    if (!p.creation_failed_reported) {
      p.creation_failed_reported = true;
      log(log_level::warning,
          fmt::format("workqueue: pool {} (cpus={}) reached {} workers; not creating more", p.id,
                      p.cpus.to_string(), max_workers_per_pool));
    }
    return false;
  }
  // Join workers that were culled, now that we hold the lock anyway.
  for (auto& d : p.dying) {
    if (d->thread.joinable()) d->thread.join();
    if (d->stat_fd >= 0) ::close(d->stat_fd);
  }
  p.dying.clear();
  const int id = p.next_worker_id++;
  auto w = std::make_unique<worker>(&p, id, worker_name(p, id));
  worker* raw = w.get();
  try {
    raw->thread = std::thread(worker_main, raw);
  } catch (const std::system_error& e) {
    if (!p.creation_failed_reported) {
      p.creation_failed_reported = true;
      log(log_level::err,
          fmt::format("workqueue: cannot create a worker for pool {}: {}", p.id, e.what()));
    }
    return false;
  }
  raw->waking = true;
  ++p.nr_waking;
  p.workers.push_back(std::move(w));
  ++p.nr_workers;
  return true;
}

// Takes `w` off the idle list (L).
void leave_idle_locked(pool& p, worker& w) {
  if (!w.idle) return;
  p.idle.erase(&w);
  w.idle = false;
  --p.nr_idle;
}

void enter_idle_locked(pool& p, worker& w) {
  w.idle = true;
  w.idle_since_ns = now_ns();
  p.idle.push_front(&w);  // LIFO: the most recently active worker is woken first
  ++p.nr_idle;
}

// Whether `w` should count in nr_running: a busy worker that is not inside may_block and
// not found asleep, and (per-CPU pools) not CPU-intensive.
bool counts_as_running(const worker& w) {
  if (w.pool->bound() && w.cpu_intensive) return false;
  return w.busy && w.block_depth == 0 && !w.found_asleep;
}

void process_one_work(pool& p, worker& w, work& item, std::unique_lock<std::mutex>& lk);

}  // namespace

// ---- pool operations -------------------------------------------------------------------

void update_count_locked(worker& w) {
  const bool should = counts_as_running(w);
  if (should == w.counted) return;
  w.counted = should;
  w.pool->nr_running += should ? 1 : -1;
  if (!should) kick_pool_locked(*w.pool);
}

// One wake-up at a time: a worker already on its way will look at the worklist, and if it
// starts an item while more are waiting it kicks again (a chain, as the kernel's).
void kick_pool_locked(pool& p) {
  if (!p.need_more_worker() || p.stopping || p.nr_waking > 0) return;
  if (worker* w = p.idle.front()) {
    leave_idle_locked(p, *w);
    w->waking = true;
    ++p.nr_waking;
    w->wake.notify_one();
    return;
  }
  create_worker_locked(p);
}

void insert_work_locked(pool& p, work& item, std::uint64_t now) {
  if (p.worklist.empty()) p.watchdog_ts.store(now, std::memory_order_relaxed);
  wq_access::activated_ns(item) = now;
  p.worklist.push_back(&item);
  wq_access::on_list(item) = &p.worklist;
  wq_access::queued_pool(item).store(&p, std::memory_order_release);  // re-checked under lock
  kick_pool_locked(p);
}

worker* this_thread_worker() noexcept {
  return tls_worker;
}

pool& bound_pool(int cpu, bool highpri) {
  return rt().bound(cpu, highpri);
}
pool& unbound_pool(const cpu_set& cpus, int node, bool highpri) {
  return rt().unbound(cpus, node, highpri);
}
std::vector<pool*> all_pools() {
  return rt().all();
}
std::uint64_t idle_timeout_ns() noexcept {
  return static_cast<std::uint64_t>(g_idle_timeout_ns.load(std::memory_order_relaxed));
}

namespace {

void setup_worker_thread(worker& w) {
  pool& p = *w.pool;
  set_this_thread_name(w.name);
  if (!pin_this_thread(p.cpus)) {
    log(log_level::warning,
        fmt::format("workqueue: cannot pin {} to CPUs {}", w.name, p.cpus.to_string()));
  }
  if (p.nice != 0) set_this_thread_nice(p.nice);  // a refusal is reported once
  tls_worker = &w;
  std::lock_guard guard(p.lock);
  w.tid = this_thread_tid();
  pthread_getcpuclockid(pthread_self(), &w.cpu_clock);
  w.stat_fd = ::open(fmt::format("/proc/self/task/{}/stat", w.tid).c_str(), O_RDONLY | O_CLOEXEC);
  w.sched = std::make_unique<schedstat_reader>(w.tid);
}

// The worker's life: sleep idle until kicked, then process items while the pool wants it
// to (kernel: worker_thread).
void worker_main(worker* self) {
  worker& w = *self;
  pool& p = *w.pool;
  setup_worker_thread(w);
  std::unique_lock lk(p.lock);
  for (;;) {
    if (w.waking) {  // we were kicked (or just created): the wake-up has arrived
      w.waking = false;
      --p.nr_waking;
    }
    if (p.stopping) break;
    if (!p.need_more_worker() && w.scheduled.empty()) {
      // Sleep until kicked; cull ourselves if idle too long while too many are idle.
      enter_idle_locked(p, w);
      rcu_voluntary_block idle_is_quiescent;  // an idle worker holds no Tasks grace period
      for (;;) {
        const auto timeout = std::chrono::nanoseconds(idle_timeout_ns());
        const bool woken = w.wake.wait_for(lk, timeout, [&] { return !w.idle || p.stopping; });
        if (woken) break;
        if (p.too_many_workers() && now_ns() - w.idle_since_ns >= idle_timeout_ns()) {
          leave_idle_locked(p, w);
          --p.nr_workers;
          if (auto s = w.sched->sample()) {
            p.exited_sched.run_ns += s->run_ns;
            p.exited_sched.run_delay_ns += s->run_delay_ns;
            p.exited_sched.switches += s->switches;
          }
          w.exited = true;
          for (auto it = p.workers.begin(); it != p.workers.end(); ++it) {
            if (it->get() == &w) {
              p.dying.push_back(std::move(*it));
              p.workers.erase(it);
              break;
            }
          }
          tls_worker = nullptr;
          return;  // joined by the next worker creation or at exit
        }
      }
      leave_idle_locked(p, w);
      continue;
    }

    w.busy = true;
    update_count_locked(w);
    watchdog_hold();
    do {
      if (!w.scheduled.empty()) {
        process_one_work(p, w, *w.scheduled.front(), lk);
        continue;
      }
      work* item = p.worklist.front();
      if (!item) break;
      // Non-reentrancy: an item running on another worker of this pool goes to that
      // worker, which runs it after its current execution (kernel: assign_work).
      worker* running = wq_access::current_worker(*item);
      if (running && running != &w) {
        p.worklist.erase(item);
        running->scheduled.push_back(item);
        wq_access::on_list(*item) = &running->scheduled;
        continue;
      }
      process_one_work(p, w, *item, lk);
    } while (!w.scheduled.empty() || p.keep_working());
    w.busy = false;
    update_count_locked(w);
    watchdog_release();
  }
  tls_worker = nullptr;
}

void report_exception(const wq_impl& wq, const work& item, const char* what) {
  log(log_level::err, fmt::format("workqueue {}: work {} threw: {}", wq.name, item.name(), what));
}

// Runs one item (kernel: process_one_work). Called and returns with the pool lock held.
void process_one_work(pool& p, worker& w, work& item, std::unique_lock<std::mutex>& lk) {
  // Take the item off whichever list holds it (the worklist or our scheduled list).
  static_cast<work_list*>(wq_access::on_list(item))->erase(&item);
  wq_access::on_list(item) = nullptr;
  wq_access::queued_pool(item).store(nullptr, std::memory_order_release);
  pwq& q = *wq_access::pwq_of(item);
  const int color = wq_access::color(item);
  const bool active = wq_access::active(item);
  const std::uint64_t start = now_ns();
  q.queue_to_start_ns.record(start - wq_access::queued_ns(item));
  p.watchdog_ts.store(start, std::memory_order_relaxed);

  wq_access::current_worker(item) = &w;
  // Published to queuers by the release-acquire chain of the pending bit (cleared below).
  wq_access::last_pool(item).store(&p, std::memory_order_release);
  w.current = &item;
  w.current_pwq = &q;
  w.current_start_ns = start;
  ++w.current_seq;
  w.cpu_intensive = q.wq->opt.cpu_intensive;
  update_count_locked(w);
  // Unbound pools start every item at once: wake another worker for the rest.
  kick_pool_locked(p);

  // Clear the pending bit before the function runs, so a re-queue runs it once more.
  const std::uint64_t id = wq_access::pending_id(item).load(std::memory_order_seq_cst);
  // running first, then pending: a flusher that reads pending == 0 (acquire) then sees it
  // running. No waiter needs waking for a start, so release stores do.
  wq_access::running_id(item).store(id, std::memory_order_release);
  wq_access::pending_id(item).store(0, std::memory_order_release);
  wq_access::flags(item).fetch_and(~work_pending, std::memory_order_seq_cst);

  if (trace::enabled()) {
    trace::emit({.ts_ns = start,
                 .name = trace::workqueue_execute_start,
                 .category = "workqueue",
                 .str_key = "function",
                 .str_val = wq_access::trace_name(item),
                 .str2_key = "workqueue",
                 .str2_val = q.wq->trace_name,
                 .num_key = "work",
                 .num_val = reinterpret_cast<std::uintptr_t>(&item),
                 .ph = trace::phase::begin});
  }
  lk.unlock();
  bool threw = false;
  try {
    wq_access::run(item);
  } catch (const std::exception& e) {
    threw = true;
    report_exception(*q.wq, item, e.what());
  } catch (...) {
    threw = true;
    report_exception(*q.wq, item, "an exception not derived from std::exception");
  }
  const std::uint64_t end = now_ns();
  if (trace::enabled()) {
    trace::emit({.ts_ns = end,
                 .name = trace::workqueue_execute_end,
                 .category = "workqueue",
                 .str_key = "function",
                 .str_val = wq_access::trace_name(item),
                 .num_key = "work",
                 .num_val = reinterpret_cast<std::uintptr_t>(&item),
                 .ph = trace::phase::end});
  }
  lk.lock();
  q.run_ns.record(end - start);
  ++q.executed;
  if (threw) ++q.exceptions;
  w.current = nullptr;
  w.current_pwq = nullptr;
  w.cpu_intensive = false;
  w.block_depth = 0;
  w.found_asleep = false;
  update_count_locked(w);
  wq_access::current_worker(item) = nullptr;
  // Last touch of the item: after this a flusher may return and the owner destroy it.
  wq_access::running_id(item).store(0, std::memory_order_seq_cst);
  // Then the instance accounting, the last touch of q (drain may return after it).
  if (q.domain->shares_pool_lock) {
    pwq_dec_nr_in_flight_locked(q, color, active);
  } else {
    lk.unlock();
    pwq_dec_nr_in_flight(q, color, active);
    lk.lock();
  }
}

}  // namespace
}  // namespace quiesce::detail

// ---- public functions ------------------------------------------------------------------

namespace quiesce {

using namespace detail;

may_block::may_block() noexcept : worker_(tls_worker) {
  if (!worker_ || !worker_->current) {
    worker_ = nullptr;
    return;
  }
  std::lock_guard guard(worker_->pool->lock);
  ++worker_->block_depth;
  update_count_locked(*worker_);
}

may_block::~may_block() {
  if (!worker_) return;
  std::lock_guard guard(worker_->pool->lock);
  if (worker_->block_depth > 0) --worker_->block_depth;
  update_count_locked(*worker_);
}

std::vector<pool_info> worker_pools() {
  std::vector<pool_info> out;
  for (pool* p : all_pools()) {
    std::lock_guard guard(p->lock);
    pool_info info;
    info.id = p->id;
    info.cpus = p->cpus.to_string();
    info.node = p->node;
    info.bound = p->bound();
    info.nice = p->nice;
    info.flags = p->flags();
    info.nr_workers = p->nr_workers;
    info.nr_idle = p->nr_idle;
    info.nr_running = p->nr_running;
    info.nr_pending = p->worklist.size();
    out.push_back(std::move(info));
  }
  return out;
}

void set_worker_idle_timeout(std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("timeout: the idle worker timeout must be positive");
  }
  g_idle_timeout_ns.store(timeout.count(), std::memory_order_relaxed);
  // Wake idle workers so they re-evaluate with the new timeout.
  for (pool* p : all_pools()) {
    std::lock_guard guard(p->lock);
    for (worker* w = p->idle.front(); w; w = p->idle.next(w))
      w->wake.notify_one();
  }
}

work* current_work() noexcept {
  return tls_worker ? tls_worker->current : nullptr;
}

}  // namespace quiesce
