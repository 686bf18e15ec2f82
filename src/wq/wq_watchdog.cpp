// SPDX-License-Identifier: Apache-2.0
// The workqueue's checks on the watchdog thread: lockups, CPU hogs, sleeping workers, and
// reports of failed worker creation. A check looks at a pool under its lock and collects
// what it has to say; it logs only after releasing the lock (a log sink may queue work).
#include <fmt/format.h>
#include <unistd.h>

#include <bit>
#include <map>
#include <string_view>

#include "../base/never_destroyed.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"

namespace quiesce::detail {

namespace {

// The scheduler state letter of a thread (R, S, D, ...) from its kept-open stat file;
// '?' if unreadable. The comm field may hold spaces and parentheses: the state follows
// the last ')'.
char thread_state(int stat_fd) {
  if (stat_fd < 0) return '?';
  char buf[512];
  const ssize_t n = ::pread(stat_fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return '?';
  const std::string_view text(buf, static_cast<std::size_t>(n));
  const auto paren = text.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= text.size()) return '?';
  return text[paren + 2];
}

// Offences per work function name, as the kernel's wci table (at most 128 functions).
// D: the watchdog thread only. Never destroyed: the watchdog runs until the process ends.
std::map<std::string, std::uint64_t>& hog_table() {
  static never_destroyed<std::map<std::string, std::uint64_t>> table;
  return table.get();
}

// What one check of one pool found, to be logged once the pool lock is released.
struct pool_reports {
  std::vector<std::pair<log_level, std::string>> lines;
  std::vector<std::string> hogs;  // functions marked CPU-intensive, one per offence
};

void report_hog(const std::string& name, const watchdog_config& c) {
  auto& table = hog_table();
  auto it = table.find(name);
  if (it == table.end()) {
    if (table.size() >= 128) return;
    it = table.emplace(name, 0).first;
  }
  const std::uint64_t count = ++it->second;
  // Report at the warning threshold and at every doubling after it (4th, 8th, 16th ...).
  if (count >= c.wq_cpu_intensive_warning && count % c.wq_cpu_intensive_warning == 0 &&
      std::has_single_bit(count / c.wq_cpu_intensive_warning)) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(c.wq_cpu_intensive);
    log(log_level::warning,
        fmt::format("workqueue: {} hogged CPU for >{}us {} times, consider switching to "
                    "WQ_UNBOUND",
                    name, us.count(), count));
    watchdog_count(watchdog_counter::wq_hog_reports);
  }
}

std::string lockup_report_locked(pool& p, std::uint64_t now, std::uint64_t since)
    QUIESCE_REQUIRES(p.lock) {
  std::string msg = fmt::format(
      "BUG: workqueue lockup - pool cpus={} node={} flags=0x{:x} nice={} stuck for {}s!",
      p.cpus.to_string(), p.node, p.flags(), p.nice, (now - since) / 1'000'000'000u);
  msg += "\nShowing busy workqueues and worker pools:";
  msg += fmt::format("\npool {}: cpus={} node={} flags=0x{:x} nice={} workers={} idle={}", p.id,
                     p.cpus.to_string(), p.node, p.flags(), p.nice, p.nr_workers, p.nr_idle);
  for (const auto& w : p.workers) {
    w->pool->lock.assert_held();
    if (!w->current) continue;
    msg += fmt::format("\n  in-flight: {}:{} [workqueue {}] running for {} ms", w->tid,
                       w->current_name, w->current_pwq->wq->name,
                       (now - w->current_start_ns) / 1'000'000u);
  }
  // The worklist, then what queuers pushed since (newest first); the chain below the
  // incoming head is stable while we hold the lock.
  std::size_t shown = 0;
  auto show = [&](work* item) {
    if (shown++ < 8) {
      msg += fmt::format("\n  pending: {} [workqueue {}]", item->name(),
                         state_of(*item).pwq_of->wq->name);
    }
  };
  for (work* item = p.worklist.front(); item; item = p.worklist.next(item))
    show(item);
  for (work* item = p.incoming.load(std::memory_order_seq_cst); item;
       item = state_of(*item).incoming_next)
    show(item);
  if (shown > 8) msg += fmt::format("\n  ... {} more pending", shown - 8);
  return msg;
}

void check_pool_locked(pool& p, std::uint64_t now, const watchdog_config& c, pool_reports& out)
    QUIESCE_REQUIRES(p.lock) {
  if (!p.creation_failure.empty()) {
    out.lines.emplace_back(log_level::err, std::move(p.creation_failure));
    p.creation_failure.clear();
    p.creation_failure_reported = true;  // once per pool, as before
  }
  // Lockup: pending work, and the first item has not changed for the threshold.
  const auto lockup_ns = static_cast<std::uint64_t>(c.wq_lockup.count());
  if (lockup_ns > 0 && p.has_work()) {
    const std::uint64_t since = p.watchdog_ts.load(std::memory_order_relaxed);
    if (now > since && now - since >= lockup_ns && p.lockup_reported_ts != since) {
      p.lockup_reported_ts = since;  // once per stall; progress re-arms it
      out.lines.emplace_back(log_level::err, lockup_report_locked(p, now, since));
      watchdog_count(watchdog_counter::wq_lockups);
    }
  }
  // CPU-intensive marking is for per-CPU pools only (an unbound item may run long).
  const auto hog_ns = p.bound() ? static_cast<std::uint64_t>(c.wq_cpu_intensive.count()) : 0;
  // By index: update_count_locked() may start a worker, growing p.workers as we go.
  for (std::size_t i = 0; i < p.workers.size(); ++i) {
    worker& w = *p.workers[i];
    w.pool->lock.assert_held();
    if (!w.current) continue;
    // An unbound pool running short items on one worker: an item that has used
    // long_item_ns of CPU time (since the watchdog first saw it) while work waits behind it
    // ends that mode (pool::short_items), and another worker starts. CPU time, not wall
    // time: a short item preempted mid-run is not a long one. (A worker asleep in its item
    // stops counting through the sleep check below.) The fields are the hog check's, which
    // unbound pools do not use.
    if (!p.bound() && p.short_items.load(std::memory_order_relaxed) && p.has_work()) {
      if (w.wd_seen_seq != w.current_seq) {
        w.wd_seen_seq = w.current_seq;
        w.wd_cpu_baseline = thread_cpu_ns(w.cpu_clock);
      } else if (thread_cpu_ns(w.cpu_clock) - w.wd_cpu_baseline >= long_item_ns &&
                 p.end_short_items_locked()) {
        kick_pool_locked(p);
      }
    }
    // CPU hog: CPU time of this execution since the watchdog first saw it.
    if (hog_ns > 0 && !w.cpu_intensive) {
      if (w.wd_seen_seq != w.current_seq) {
        w.wd_seen_seq = w.current_seq;
        w.wd_cpu_baseline = thread_cpu_ns(w.cpu_clock);
      } else if (thread_cpu_ns(w.cpu_clock) - w.wd_cpu_baseline >= hog_ns) {
        w.cpu_intensive = true;                   // stops counting: another worker may start
        w.current_pwq->pool->lock.assert_held();  // the pwq of this pool it runs for
        ++w.current_pwq->hogs;
        watchdog_count(watchdog_counter::wq_cpu_hogs);
        update_count_locked(w);
        out.hogs.push_back(w.current_name);
      }
    }
    if (c.wq_sleep_detection) check_worker_sleep_locked(w);
  }
}

}  // namespace

bool worker_asleep_in_item(const worker& w, char state) noexcept {
  if (state != 'S' && state != 'D') return false;
  // The state was read first: a worker that left its function and then went to sleep
  // cleared in_function before its sleep began, and the kernel's futex wait puts a full
  // barrier between that store and the state it sets; the fence keeps this load after the
  // state's (free on x86). An argument about the hardware and the kernel, not the C++
  // memory model (the state is no atomic of ours): a stale true only counts one sleeper
  // too many, as every sleeper did before.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (mutant::sleepers_include_lock_waits) return true;
  // Waiting for a runtime lock inside the item is no sleep of the item's (the same argument:
  // the flag is set before the futex wait that put it to sleep, and cleared before any
  // later sleep).
  return w.in_function.load(std::memory_order_relaxed) &&
         (mutant::sleepers_include_item_lock_waits ||
          !w.in_lock_wait.load(std::memory_order_relaxed));
}

void check_worker_sleep_locked(worker& w) {
  pool& p = *w.pool;
  p.lock.assert_held();
  if (w.counted && p.has_work()) {
    if (worker_asleep_in_item(w, thread_state(w.stat_fd))) {
      w.found_asleep = true;
      watchdog_count(watchdog_counter::wq_sleepers);
      update_count_locked(w);
    }
  } else if (w.found_asleep && thread_state(w.stat_fd) == 'R') {
    w.found_asleep = false;
    update_count_locked(w);
  }
}

void wq_watchdog_check(const std::vector<pool*>& pools, std::uint64_t now,
                       const watchdog_config& c) {
  for (pool* p : pools) {
    pool_reports found;
    {
      detail::lock_guard guard(p->lock);
      check_pool_locked(*p, now, c, found);
    }
    for (auto& [level, line] : found.lines)
      log(level, line);
    for (const std::string& name : found.hogs)
      report_hog(name, c);
  }
}

}  // namespace quiesce::detail
