// SPDX-License-Identifier: Apache-2.0
#include "quiesce/watchdog.hpp"

#include "plugin.hpp"

#include <pthread.h>
#include <algorithm>
#include <atomic>

#include <condition_variable>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../base/futex.hpp"
#include "../base/mutant.hpp"
#include "../base/mutex.hpp"
#include "../base/never_destroyed.hpp"
#include "../base/signal_mask.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce {

namespace {

using namespace std::chrono_literals;
using detail::watchdog_check;

// Deliberately broken builds (tests/mutants, built against the workqueue suite, whose
// watchdog tests watch this module): the suite must fail on each.
namespace mutant {
// set_config does not cut the sleep between ticks short (a new tick waits for the old one)
inline constexpr bool config_waits_tick = QUIESCE_MUTANT(WATCHDOG_CONFIG_WAITS_TICK);
// a hold wakes a sleeping watchdog every time the holds rise from zero, and the watchdog
// leaves its sleep only if it still finds something held (as it did until 2026-12: a trickle
// of short items then paid a futex wake-up, and a switch to the watchdog, each)
inline constexpr bool wakes_every_hold = QUIESCE_MUTANT(WATCHDOG_WAKES_EVERY_HOLD);
}  // namespace mutant

class watchdog;
watchdog& the_watchdog();

// The watchdog thread and its state. A process-lifetime object, never stopped. Protection
// legend (docs/DESIGN.md): L(lock_) - QUIESCE_GUARDED_BY - and A.
class watchdog {
 public:
  watchdog() {
    // fork(): no check may be left "running" in the child, where the thread does not exist.
    if (const int err = ::pthread_atfork(&fork_prepare, &fork_parent, &fork_child); err != 0) {
      throw std::system_error(err, std::generic_category(), "watchdog: pthread_atfork");
    }
  }

  std::uint64_t add(std::string name, watchdog_check check) {
    detail::lock_guard guard(lock_);
    const std::uint64_t id = ++last_id_;
    checks_.emplace(id, entry{std::move(name), std::move(check)});
    if (!thread_.joinable() && !in_fork_child_) {
      const detail::async_signals_blocked mask;  // inherited by the thread (signal_mask.hpp)
      thread_ = named_thread("quiesce-wdog", [this] { run(); });
    }
    return id;
  }

  void remove(std::uint64_t id) {
    detail::unique_lock guard(lock_);
    checks_.erase(id);
    // A check that is running now finishes before remove() returns.
    while (running_check_ == id)
      guard.wait(idle_cv_);
  }

  // In a fork child the watchdog thread does not exist: no check runs there (running_check_
  // is cleared, so remove() never waits for one), and none starts. The handlers hand lock_
  // from the prepare handler to the others, which the analysis cannot follow.
  static void fork_prepare() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
    the_watchdog().lock_.lock();
  }
  static void fork_parent() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
    the_watchdog().lock_.unlock();
  }
  static void fork_child() noexcept QUIESCE_NO_THREAD_SAFETY_ANALYSIS {
    watchdog& w = the_watchdog();
    w.lock_.assert_held();
    w.running_check_ = 0;
    w.in_fork_child_ = true;
    w.lock_.unlock();
  }

  // The sleep between ticks is cut short: a tick shortened from an hour takes effect now.
  void set_config(const watchdog_config& c) {
    {
      detail::lock_guard guard(lock_);
      config_ = c;
      ++config_gen_;
    }
    if (!mutant::config_waits_tick) tick_cv_.notify_all();
  }
  watchdog_config config() {
    detail::lock_guard guard(lock_);
    return config_;
  }

  // The first hold after the thread went to sleep wakes it, once: it takes the sleep
  // (sleeping_ 1 -> 0), so the holds after it - a trickle of short items rises from zero at
  // each - find the thread awake (or waking) and pay no system call. Dekker with the sleep in
  // run(): the holder's add before its read of sleeping_, the thread's store of sleeping_
  // before its read of holds_ (all seq_cst), so one of them sees the other.
  void hold() noexcept {
    if (holds_.fetch_add(1, std::memory_order_seq_cst) != 0) return;
    if (sleeping_.load(std::memory_order_seq_cst) == 0) return;
    if (mutant::wakes_every_hold || sleeping_.exchange(0, std::memory_order_seq_cst) != 0) {
      wakeups_.fetch_add(1, std::memory_order_relaxed);
      detail::futex_wake_one(sleeping_);
    }
  }
  void release() noexcept { holds_.fetch_sub(1, std::memory_order_release); }

  // For the tests (plugin.hpp): the sleeps the thread began, the wake-ups holds sent.
  detail::watchdog_sleep_stats sleep_stats() const noexcept {
    return {.sleeps = sleeps_.load(std::memory_order_relaxed),
            .wakeups = wakeups_.load(std::memory_order_relaxed),
            .asleep = sleeping_.load(std::memory_order_seq_cst) != 0};
  }

  // A (relaxed): the reports of each kind, indexed by detail::watchdog_counter.
  std::atomic<std::uint64_t> counters[static_cast<std::size_t>(detail::watchdog_counter::count_)] =
      {};

 private:
  struct entry {
    std::string name;
    watchdog_check check;
  };

  std::chrono::nanoseconds tick_of(const watchdog_config& c) {
    auto t = c.tick;
    if (c.wq_cpu_intensive > 0ns) t = std::min(t, c.wq_cpu_intensive / 2);
    for (auto threshold :
         {c.wq_lockup, c.rcu_stall, c.rcu_tasks_stall, c.rcu_tasks_info, c.hung_task}) {
      if (threshold > 0ns) t = std::min(t, threshold / 4);
    }
    return std::max<std::chrono::nanoseconds>(t, 100us);
  }

  void run() {
    std::uint64_t idle_since = 0;  // when holds_ was last seen non-zero
    detail::unique_lock guard(lock_);
    for (;;) {
      const watchdog_config cfg = config_;
      const std::uint64_t cfg_gen = config_gen_;
      std::vector<std::uint64_t> ids;
      for (const auto& [id, e] : checks_)
        ids.push_back(id);
      for (const std::uint64_t id : ids) {
        const auto it = checks_.find(id);  // removed while an earlier check ran?
        if (it == checks_.end()) continue;
        running_check_ = id;
        watchdog_check check = it->second.check;  // copy: remove() may erase the entry
        guard.unlock();
        check(now_ns(), cfg);
        guard.lock();
        running_check_ = 0;
        idle_cv_.notify_all();
      }
      const std::uint64_t now = now_ns();
      if (holds_.load(std::memory_order_acquire) != 0) idle_since = now;
      if (now - idle_since > 1'000'000'000u) {
        // Nothing in flight for a second: sleep until something is.
        // (The futex, not std::atomic::wait: see base/futex.hpp.) It ends when a hold takes
        // the sleep, whether or not the hold has been released since.
        guard.unlock();
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        sleeping_.store(1, std::memory_order_seq_cst);
        while (holds_.load(std::memory_order_seq_cst) == 0 &&
               (mutant::wakes_every_hold || sleeping_.load(std::memory_order_seq_cst) != 0)) {
          detail::futex_wait(sleeping_, 1);
        }
        sleeping_.store(0, std::memory_order_seq_cst);
        guard.lock();
        idle_since = now_ns();
        continue;
      }
      // Not if the configuration changed while the checks ran: its notification came before
      // this wait, and a tick shortened from an hour would wait the hour.
      if (config_gen_ == cfg_gen) {
        guard.wait_until(tick_cv_, std::chrono::steady_clock::now() + tick_of(cfg));
      }
    }
  }

  detail::mutex lock_{"watchdog lock_"};
  std::condition_variable tick_cv_;  // the sleep between ticks (set_config cuts it short)
  std::condition_variable idle_cv_;  // a check finished running
  std::map<std::uint64_t, entry> checks_ QUIESCE_GUARDED_BY(lock_);
  std::uint64_t last_id_ QUIESCE_GUARDED_BY(lock_) = 0;
  // The id of the check running now, 0 if none.
  std::uint64_t running_check_ QUIESCE_GUARDED_BY(lock_) = 0;
  // Set in a fork child (no thread there).
  bool in_fork_child_ QUIESCE_GUARDED_BY(lock_) = false;
  watchdog_config config_ QUIESCE_GUARDED_BY(lock_);
  std::uint64_t config_gen_ QUIESCE_GUARDED_BY(lock_) = 0;  // set_config calls, ever
  named_thread thread_ QUIESCE_GUARDED_BY(lock_);           // started once
  std::atomic<std::int64_t> holds_{0};  // A: things in flight; seq_cst with sleeping_
  // A: 1 while the thread sleeps (a futex word); the hold that wakes it sets 0.
  std::atomic<std::uint32_t> sleeping_{0};
  std::atomic<std::uint64_t> sleeps_{0};   // A (relaxed): sleeps begun, for the tests
  std::atomic<std::uint64_t> wakeups_{0};  // A (relaxed): wake-ups sent by holds
};

// Never destroyed: runtime threads report through it until the process ends; its thread
// sleeps while nothing is in flight and ends with the process.
watchdog& the_watchdog() {
  static detail::never_destroyed<watchdog> w;
  return w.get();
}

}  // namespace

void set_watchdog_config(const watchdog_config& c) {
  if (c.tick <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("watchdog_config.tick: must be positive");
  }
  if (c.wq_lockup < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("watchdog_config.wq_lockup: must not be negative");
  }
  if (c.wq_cpu_intensive < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("watchdog_config.wq_cpu_intensive: must not be negative");
  }
  for (auto [value, field] :
       {std::pair{c.rcu_stall, "rcu_stall"}, std::pair{c.rcu_tasks_stall, "rcu_tasks_stall"},
        std::pair{c.rcu_tasks_info, "rcu_tasks_info"}, std::pair{c.hung_task, "hung_task"}}) {
    if (value < std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument(std::string("watchdog_config.") + field +
                                  ": must not be negative");
    }
  }
  if (c.rcu_tasks_info_mult == 0) {
    throw std::invalid_argument("watchdog_config.rcu_tasks_info_mult: must be at least 1");
  }
  if (c.wq_cpu_intensive_warning == 0) {
    throw std::invalid_argument("watchdog_config.wq_cpu_intensive_warning: must be at least 1");
  }
  the_watchdog().set_config(c);
}

watchdog_config get_watchdog_config() {
  return the_watchdog().config();
}

watchdog_counters get_watchdog_counters() {
  watchdog& w = the_watchdog();
  const auto read = [&](detail::watchdog_counter c) {
    return w.counters[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
  };
  using detail::watchdog_counter;
  return {.wq_lockups = read(watchdog_counter::wq_lockups),
          .wq_cpu_hogs = read(watchdog_counter::wq_cpu_hogs),
          .wq_hog_reports = read(watchdog_counter::wq_hog_reports),
          .wq_sleepers = read(watchdog_counter::wq_sleepers),
          .rcu_stall_infos = read(watchdog_counter::rcu_stall_infos),
          .rcu_stalls = read(watchdog_counter::rcu_stalls),
          .rcu_hung_waiters = read(watchdog_counter::rcu_hung_waiters)};
}

namespace detail {

void watchdog_count(watchdog_counter c) noexcept {
  the_watchdog().counters[static_cast<std::size_t>(c)].fetch_add(1, std::memory_order_relaxed);
}

watchdog_registration watchdog_register(std::string name, watchdog_check check) {
  return watchdog_registration(the_watchdog().add(std::move(name), std::move(check)));
}

watchdog_registration& watchdog_registration::operator=(watchdog_registration&& other) noexcept {
  if (this != &other) {
    if (id_) the_watchdog().remove(id_);
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

watchdog_registration::~watchdog_registration() {
  if (id_) the_watchdog().remove(id_);
}

void watchdog_hold() noexcept {
  the_watchdog().hold();
}
void watchdog_release() noexcept {
  the_watchdog().release();
}
watchdog_sleep_stats get_watchdog_sleep_stats() noexcept {
  return the_watchdog().sleep_stats();
}

}  // namespace detail
}  // namespace quiesce
