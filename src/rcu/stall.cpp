// SPDX-License-Identifier: Apache-2.0
// The RCU stall detector, run by the watchdog while a grace period is in progress:
// informational reports of old Tasks grace periods, stall reports naming the holdout
// threads, and hung waiters - in the kernel's words.
#include <fmt/format.h>

#include <mutex>
#include <string>
#include <vector>

#include "../base/never_destroyed.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/watchdog.hpp"

namespace quiesce::detail {

namespace {

std::uint64_t ms(std::uint64_t ns) {
  return ns / 1'000'000u;
}

void report_stall(rcu_state& st, std::uint64_t gp, std::uint64_t now, std::uint64_t start) {
  std::string msg = fmt::format("INFO: {} detected stalls on threads:", st.name);
  int holdouts = 0;
  {
    lock_guard guard(st.registry_lock);
    for (rcu_reader_entry* r = st.readers.front(); r; r = st.readers.next(r)) {
      const std::uint64_t word = r->word->load(std::memory_order_acquire);
      if (!st.flavor.holds(word, gp)) continue;
      ++holdouts;
      // A holdout has not passed a quiescent state since this grace period started.
      msg += fmt::format("\n\t{}:{} holds grace period {}: no quiescent state for more than {} ms",
                         r->name, r->tid, gp, ms(now - start));
    }
  }
  if (holdouts == 0) msg += "\n\t(no holdout left: the grace period is ending)";
  msg += fmt::format("\n\t({} grace period {} started {} ms ago)", st.name, gp, ms(now - start));
  log(log_level::err, msg);
  st.stalls.fetch_add(1, std::memory_order_relaxed);
  watchdog_count(watchdog_counter::rcu_stalls);
}

void check_domain(rcu_state& st, std::uint64_t now, const watchdog_config& c) {
  const std::uint64_t started = st.gp_started.load(std::memory_order_seq_cst);
  const std::uint64_t completed = st.gp_completed.load(std::memory_order_seq_cst);
  // A grace period whose first scan is yet to find a holdout is not timed yet (start 0).
  if (const std::uint64_t start = st.gp_start_ns.load(std::memory_order_relaxed);
      started > completed && start != 0) {
    const std::uint64_t age = now > start ? now - start : 0;
    // Informational (Tasks): at rcu_tasks_info, then after mult times the last interval.
    const auto info = static_cast<std::uint64_t>(c.rcu_tasks_info.count());
    if (st.flavor.info_reports && info > 0) {
      if (st.info_gp != started) {
        st.info_gp = started;
        st.info_interval_ns = info;
        st.next_info_ns = start + info;
      }
      if (now >= st.next_info_ns) {
        log(log_level::info,
            fmt::format("rcu_tasks_wait_gp: {} grace period number {} (since boot) is {} ms old.",
                        st.name, started, ms(age)));
        st.stall_infos.fetch_add(1, std::memory_order_relaxed);
        watchdog_count(watchdog_counter::rcu_stall_infos);
        st.info_interval_ns *= c.rcu_tasks_info_mult;
        st.next_info_ns += st.info_interval_ns;
      }
    }
    const auto stall = static_cast<std::uint64_t>(
        (st.flavor.tasks_stall_timeout ? c.rcu_tasks_stall : c.rcu_stall).count());
    if (stall > 0 && age >= stall && st.stalled_gp != started) {
      st.stalled_gp = started;  // once per grace period
      report_stall(st, started, now, start);
    }
  }
  // Hung waiters: blocked in rcu_synchronize / rcu_barrier for too long, once each. The
  // reports are formatted under the lock and logged after it is released.
  const auto hung = static_cast<std::uint64_t>(c.hung_task.count());
  if (hung == 0) return;
  struct hung_waiter {
    pid_t tid;
    std::uint64_t blocked_ns;
  };
  std::vector<hung_waiter> found;
  {
    lock_guard guard(st.waiters_lock);
    for (rcu_waiter* w = st.waiters.front(); w; w = st.waiters.next(w)) {
      if (w->reported || now < w->since_ns || now - w->since_ns < hung) continue;
      w->reported = true;
      found.push_back({w->tid, now - w->since_ns});
    }
  }
  // Formatted after the lock is released (the names are read from /proc).
  std::vector<std::string> reports;
  for (const hung_waiter& w : found) {
    // Whole seconds as the kernel prints them; sub-second thresholds (tests) keep their ms.
    const double secs = static_cast<double>(hung) / 1e9;
    const std::string seconds =
        hung % 1'000'000'000u == 0 ? fmt::format("{:.0f}", secs) : fmt::format("{:.3f}", secs);
    reports.push_back(
        fmt::format("INFO: task {}:{} blocked for more than {} seconds.\n"
                    "\twaiting for a {} grace period ({} ms so far)",
                    thread_name_of(w.tid), w.tid, seconds, st.name, ms(w.blocked_ns)));
  }
  for (const std::string& line : reports) {
    log(log_level::err, line);
    st.hung.fetch_add(1, std::memory_order_relaxed);
    watchdog_count(watchdog_counter::rcu_hung_waiters);
  }
}

}  // namespace

void rcu_watchdog_install() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      // Never destroyed, as the runtime's other objects: the check stays for the process.
      static never_destroyed<watchdog_registration> registration(
          // Grace periods and waiters are stamped with stat_ns() (clock.hpp): their
          // ages are taken on that clock.
          watchdog_register("rcu", [](std::uint64_t, const watchdog_config& c) {
            const std::uint64_t now = stat_ns();
            for (rcu_state* st : all_states())
              check_domain(*st, now, c);
          }));
    });
  } catch (const std::exception& e) {
    log(log_level::err, fmt::format("rcu: cannot start the stall detector: {}", e.what()));
  }
}

}  // namespace quiesce::detail
