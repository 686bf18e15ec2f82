// SPDX-License-Identifier: Apache-2.0
// The watchdog with millisecond thresholds: hog reports, sleep detection and lockups.
#include "quiesce/watchdog.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../../../src/watchdog/plugin.hpp"
#include "internal.hpp"
#include "quiesce/log.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/workqueue.hpp"
#include "sched_idle.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::gate;

int cpu0() {
  return system_topology().cpus().first();
}

// Spins on the CPU (never sleeping, never in may_block) until `done` or a deadline.
void spin_until(const std::atomic<bool>& done) {
  const std::uint64_t end = now_ns() + 60'000'000'000ull;
  while (!done.load() && now_ns() < end) {
  }
}

TEST(Watchdog, HoggingItemIsReportedAndDoesNotBlockItsPool) {
  scoped_watchdog_config cfg({.tick = 1ms, .wq_cpu_intensive = 5ms});
  log_capture capture;
  workqueue wq("hogs");
  const auto hogs_before = get_watchdog_counters().wq_cpu_hogs;
  for (int round = 1; round <= 4; ++round) {
    std::atomic<bool> second_ran{false};
    work second("second", [&](work&) { second_ran = true; });
    // The hog waits for `second`, queued behind it on the same CPU: only the watchdog
    // marking it CPU-intensive lets the pool start another worker for `second`.
    work hog("spinner", [&](work&) {
      EXPECT_TRUE(wq.queue_on(cpu0(), second));
      spin_until(second_ran);
    });
    ASSERT_TRUE(wq.queue_on(cpu0(), hog));
    hog.flush();
    EXPECT_TRUE(second_ran.load()) << "round " << round;
    second.flush();
  }
  EXPECT_GE(get_watchdog_counters().wq_cpu_hogs - hogs_before, 4u);
  // The watchdog logs once it has released the pool lock, possibly after the items ran.
  const char* const report =
      "workqueue: spinner hogged CPU for >5000us 4 times, consider switching to WQ_UNBOUND";
  EXPECT_TRUE(eventually([&] { return capture.count(report) > 0; }));
  EXPECT_EQ(capture.count(report), 1u);
  EXPECT_GE(wq.stats().hog_reports, 4u);
}

// set_watchdog_config takes effect at once: a watchdog asleep on a tick of an hour (and no
// check with a threshold that would shorten it) marks a hog within its new tick of 1 ms.
// Before, the new configuration waited for the end of the old tick's sleep - an hour here.
TEST(Watchdog, ANewConfigurationTakesEffectAtOnce) {
  watchdog_config hour = get_watchdog_config();
  hour.tick = 1h;
  hour.wq_lockup = hour.wq_cpu_intensive = hour.rcu_stall = hour.rcu_tasks_stall =
      hour.rcu_tasks_info = hour.hung_task = 0ns;
  scoped_watchdog_config restore(hour);
  workqueue wq("reconfigured");
  const auto hogs_before = get_watchdog_counters().wq_cpu_hogs;
  gate running;
  std::atomic<bool> marked{false};
  work hog("spinner", [&](work&) {
    running.open();
    spin_until(marked);
  });
  ASSERT_TRUE(wq.queue_on(cpu0(), hog));
  ASSERT_TRUE(running.wait());
  // (Time for the watchdog to fall asleep on the hour's tick - without it the test could
  // pass on a sleep that began before the hour was set, never on a lost new configuration.)
  std::this_thread::sleep_for(20ms);
  set_watchdog_config({.tick = 1ms, .wq_cpu_intensive = 5ms});
  const bool seen =
      eventually([&] { return get_watchdog_counters().wq_cpu_hogs > hogs_before; }, 10s);
  marked = true;
  hog.flush();
  EXPECT_TRUE(seen) << "a new configuration waited for the old tick's sleep to end";
}

// A watchdog asleep (nothing held for a second) is woken by the first hold after it, once:
// the holds after that one - a trickle of short items, each rising from zero and released
// long before the watchdog runs - send no wake-up, and the watchdog leaves its sleep although
// it finds nothing held when it runs. Before, every such hold woke it, and it slept on (each
// item paid a futex wake-up and a switch to the watchdog). The watchdog thread is kept off
// the CPU for the holds (SCHED_IDLE, on this thread's CPU, which the loop never gives up), so
// that all of them fall before it runs (kills watchdog_wakes_every_hold: 200 wake-ups). A
// window in which it ran all the same tells nothing - the mutant's watchdog that catches the
// first hold held leaves its sleep and is woken no more (in CI, under load, it passed so) - and
// is tried again, until one in which it did not run.
TEST(Watchdog, ATrickleOfShortHoldsWakesASleepingWatchdogOnce) {
  if (!test::may_leave_sched_idle()) GTEST_SKIP() << "a thread cannot leave SCHED_IDLE here";
  const pid_t thread = test::thread_named("quiesce-wdog");
  ASSERT_NE(thread, 0) << "no watchdog thread";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (int window = 1;; ++window) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "in " << window - 1 << " windows the watchdog ran inside every one";
    ASSERT_TRUE(eventually([] { return detail::get_watchdog_sleep_stats().asleep; }, 60s))
        << "the watchdog never fell asleep (something stays held)";
    detail::watchdog_sleep_stats before, after;
    bool ran = false;
    {
      test::hold_off_cpu held(thread);
      before = detail::get_watchdog_sleep_stats();
      constexpr int holds = 200;
      for (int i = 0; i < holds; ++i) {
        detail::watchdog_hold();
        detail::watchdog_release();
      }
      after = detail::get_watchdog_sleep_stats();
      ran = held.thread_ran();
    }
    if (ran || !before.asleep) continue;  // it ran (or woke) before the holds ended
    EXPECT_EQ(after.wakeups - before.wakeups, 1u)
        << "holds woke the sleeping watchdog more than once";
    EXPECT_EQ(after.sleeps, before.sleeps);
    if (HasFailure()) return;  // (the mutant's watchdog sleeps on: no 60 s wait for it)
    // It wakes although every hold ended before it could run.
    EXPECT_TRUE(eventually([] { return !detail::get_watchdog_sleep_stats().asleep; }, 60s));
    return;
  }
}

// An item may destroy itself from its own function (the kernel lets a work function free
// its work_struct) and go on running without touching it: the watchdog that marks it a CPU
// hog then reports the name it ran under, never reading the freed item (ASan: a
// heap-use-after-free here before the worker kept the name).
TEST(Watchdog, AHogThatDestroyedItselfIsReportedByName) {
  scoped_watchdog_config cfg({.tick = 1ms, .wq_cpu_intensive = 5ms});
  log_capture capture;
  workqueue wq("self_hogs");
  for (int round = 1; round <= 4; ++round) {
    std::atomic<bool> second_ran{false}, hog_done{false};
    work second("second", [&](work&) { second_ran = true; });
    auto* hog = new work("self_destroying_hog", [&](work& self) {
      // What it needs after the delete, off the item (its closure dies with it).
      std::atomic<bool>* const ran = &second_ran;
      std::atomic<bool>* const done = &hog_done;
      workqueue* const q = &wq;
      work* const next = &second;
      delete &self;
      EXPECT_TRUE(q->queue_on(cpu0(), *next));
      spin_until(*ran);  // only the watchdog's marking lets `second` start
      done->store(true);
    });
    ASSERT_TRUE(wq.queue_on(cpu0(), *hog));
    ASSERT_TRUE(eventually([&] { return hog_done.load(); })) << "round " << round;
    second.flush();
    EXPECT_TRUE(second_ran.load()) << "round " << round;
  }
  const char* const report = "workqueue: self_destroying_hog hogged CPU for >5000us 4 times";
  EXPECT_TRUE(eventually([&] { return capture.count(report) > 0; }));
  wq.flush();
}

TEST(Watchdog, ItemBlockingWithoutMayBlockDoesNotStallItsPool) {
  scoped_watchdog_config cfg({.tick = 1ms});
  workqueue wq("sleeper");
  gate second_ran;
  work second("second", [&](work&) { second_ran.open(); });
  work sleeper("sleeper", [&](work&) {
    EXPECT_TRUE(wq.queue_on(cpu0(), second));
    EXPECT_TRUE(second_ran.wait());  // blocks on a condition variable, no may_block
  });
  const auto before = get_watchdog_counters().wq_sleepers;
  ASSERT_TRUE(wq.queue_on(cpu0(), sleeper));
  wq.flush();
  second.flush();
  EXPECT_TRUE(second_ran.is_open());
  EXPECT_GE(get_watchdog_counters().wq_sleepers - before, 1u);
}

// A worker that sleeps waiting for the pool lock - held here by the test, as the sleep check
// itself holds it while it looks - is not asleep in its item: a kernel worker spins on
// pool->lock and never counts as sleeping there. Counting it started a needless worker at
// about one watchdog tick in four under a backlog (kills sleepers_include_lock_waits).
TEST(Watchdog, AWorkerWaitingForThePoolLockIsNotFoundAsleep) {
  // The watchdog's own sleep check (and hog marking) off: the test makes the check, at a
  // chosen moment.
  scoped_watchdog_config cfg({.wq_cpu_intensive = 0ns, .wq_sleep_detection = false});
  const int cpu = cpu0();
  workqueue wq("lock_waiter");
  std::atomic<bool> started{false}, go{false}, returning{false};
  std::atomic<pid_t> tid{0};
  work first("first", [&](work&) {
    tid = static_cast<pid_t>(::gettid());
    started = true;
    spin_until(go);  // running, never asleep
    returning = true;
  });
  work second("second", [](work&) {});
  ASSERT_TRUE(wq.queue_on(cpu, first));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(wq.queue_on(cpu, second));  // waits behind first: the pool has work
  detail::pool& p = detail::bound_pool(cpu, false);
  bool counted = false, has_work = false, found_asleep = false;
  {
    detail::lock_guard guard(p.lock);
    go = true;
    // first returns; its worker then waits for the lock this thread holds.
    ASSERT_TRUE(eventually([&] { return returning.load() && test::thread_state(tid) == 'S'; }))
        << "the worker never went to sleep on the pool lock";
    for (const auto& w : p.workers) {
      w->pool->lock.assert_held();
      if (w->current != &first) continue;
      counted = w->counted;
      has_work = p.has_work();
      detail::check_worker_sleep_locked(*w);
      found_asleep = w->found_asleep;
    }
  }
  ASSERT_TRUE(counted && has_work) << "the check had nothing to decide (the setup failed)";
  EXPECT_FALSE(found_asleep) << "a worker waiting for the pool lock was found asleep";
  first.flush();
  second.flush();
}

// The same inside an item: a function that cancels another item of its pool waits for the
// pool lock (held here) - waiting for a runtime lock, not asleep in its item (kernel: it
// would spin on pool->lock), so the sleep check must not count it out (kills
// sleepers_include_item_lock_waits).
TEST(Watchdog, AnItemWaitingForThePoolLockIsNotFoundAsleep) {
  scoped_watchdog_config cfg({.wq_cpu_intensive = 0ns, .wq_sleep_detection = false});
  const int cpu = cpu0();
  workqueue wq("item_lock_waiter");
  std::atomic<bool> started{false}, go{false}, cancelling{false}, cancelled{false};
  std::atomic<pid_t> tid{0};
  work second("second", [](work&) {});
  work first("first", [&](work&) {
    tid = static_cast<pid_t>(::gettid());
    started = true;
    spin_until(go);  // running, never asleep
    cancelling = true;
    cancelled = second.cancel();  // takes the pool lock: waits for this test's hold
  });
  ASSERT_TRUE(wq.queue_on(cpu, first));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(wq.queue_on(cpu, second));  // waits behind first: the pool has work
  detail::pool& p = detail::bound_pool(cpu, false);
  bool counted = false, has_work = false, found_asleep = false, in_item = false;
  {
    detail::lock_guard guard(p.lock);
    detail::worker* runner = nullptr;
    for (const auto& w : p.workers) {
      w->pool->lock.assert_held();
      if (w->current == &first) runner = w.get();
    }
    ASSERT_NE(runner, nullptr);
    go = true;
    // Asleep, and on this lock (not some other sleep on its way there).
    ASSERT_TRUE(eventually([&] {
      return cancelling.load() && runner->in_lock_wait.load() && test::thread_state(tid) == 'S';
    })) << "the item never went to sleep on the pool lock";
    for (const auto& w : p.workers) {
      w->pool->lock.assert_held();
      if (w->current != &first) continue;
      counted = w->counted;
      has_work = p.has_work();
      in_item = w->in_function.load();
      detail::check_worker_sleep_locked(*w);
      found_asleep = w->found_asleep;
    }
  }
  ASSERT_TRUE(counted && has_work && in_item) << "the check had nothing to decide (the setup "
                                                 "failed)";
  EXPECT_FALSE(found_asleep) << "an item waiting for the pool lock was found asleep";
  first.flush();
  EXPECT_TRUE(cancelled.load());
}

// An item that threw, whose worker then blocks in the log sink reporting it, is still asleep
// in its item: the sleep check starts another worker for the item queued behind it (kills
// sleepers_exclude_report).
TEST(Watchdog, AWorkerBlockedInTheSinkReportingItsItemIsFoundAsleep) {
  scoped_watchdog_config cfg({.tick = 1ms});
  workqueue wq("sink_sleeper");
  gate reported, release, second_ran;
  struct sink_scope {
    log_sink previous;
    gate& release;
    ~sink_scope() {
      release.open();  // first: restoring the sink waits for it to return
      set_log_sink(std::move(previous));
    }
  } scope{set_log_sink([&](log_level, std::string_view line) {
            if (line.find("work thrower threw") == std::string_view::npos) return;
            reported.open();
            EXPECT_TRUE(release.wait());
          }),
          release};
  work second("second", [&](work&) { second_ran.open(); });
  work thrower("thrower", [&](work&) {
    EXPECT_TRUE(wq.queue_on(cpu0(), second));
    throw std::runtime_error("on purpose");
  });
  ASSERT_TRUE(wq.queue_on(cpu0(), thrower));
  ASSERT_TRUE(reported.wait());
  EXPECT_TRUE(second_ran.wait()) << "the item behind a worker blocked in the log sink never ran";
  release.open();
  thrower.flush();
  second.flush();
}

TEST(Watchdog, EverySleepingWorkerIsReplacedUntilAllItemsRun) {
  // Eight items on one CPU each block (no may_block) until all eight have started: only
  // the sleep detection, replacing each sleeper with a new worker, gets there.
  scoped_watchdog_config cfg({.tick = 1ms});
  constexpr int n = 8;
  std::atomic<int> started{0};
  gate all_started;
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<work>("sleepy", [&](work&) {
      if (++started == n) all_started.open();
      EXPECT_TRUE(all_started.wait());
    }));
  }
  workqueue wq("sleepers");
  for (auto& w : items)
    ASSERT_TRUE(wq.queue_on(cpu0(), *w));
  wq.flush();
  EXPECT_EQ(started.load(), n);
}

TEST(Watchdog, SpinningItemWithHogHandlingOffIsALockup) {
  scoped_watchdog_config cfg({.tick = 1ms, .wq_lockup = 50ms, .wq_cpu_intensive = 0ns});
  log_capture capture;
  workqueue wq("lockup");
  std::atomic<bool> victim_ran{false};
  work victim("victim", [&](work&) { victim_ran = true; });
  work spinner("key_garbage_collector", [&](work&) {
    EXPECT_TRUE(wq.queue_on(cpu0(), victim));
    const std::uint64_t end = now_ns() + 60'000'000'000ull;
    // The report's last line: once it is there, the whole report is.
    while (capture.count("pending: victim [workqueue lockup]") == 0 && now_ns() < end) {
    }
    EXPECT_FALSE(victim_ran.load());  // stuck behind us: that is the lockup
  });
  const auto before = get_watchdog_counters().wq_lockups;
  ASSERT_TRUE(wq.queue_on(cpu0(), spinner));
  wq.flush();
  victim.flush();
  EXPECT_TRUE(victim_ran.load());
  const std::string pool = "BUG: workqueue lockup - pool cpus=" + std::to_string(cpu0()) +
                           " node=0 flags=0x0 nice=0 stuck for ";
  EXPECT_EQ(capture.count(pool), 1u);
  EXPECT_EQ(capture.count("in-flight: "), 1u);
  EXPECT_EQ(capture.count(":key_garbage_collector [workqueue lockup] running for"), 1u);
  EXPECT_EQ(capture.count("pending: victim [workqueue lockup]"), 1u);
  EXPECT_EQ(get_watchdog_counters().wq_lockups - before, 1u);
}

// Progress re-arms the lockup clock: a pool whose worker keeps starting items, each well
// within the threshold, is no lockup however long its backlog lasts. (The worker notes
// progress at most every 100 us, pool::note_progress; a worker that never noted it would
// leave the clock at the backlog's arrival and be reported after 300 ms: mutant
// progress_not_noted.)
TEST(Watchdog, APoolThatKeepsStartingItemsIsNoLockup) {
  scoped_watchdog_config cfg({.tick = 1ms, .wq_lockup = 300ms, .wq_cpu_intensive = 0ns});
  log_capture capture;
  workqueue wq("backlog");
  constexpr int n = 60;  // 10 ms each: twice the threshold in all
  std::vector<std::unique_ptr<work>> items;
  std::atomic<int> ran{0};
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<work>("ten_ms", [&ran](work&) {
      const std::uint64_t end = now_ns() + 10'000'000;
      while (now_ns() < end) {
      }
      ran.fetch_add(1);
    }));
  }
  const auto before = get_watchdog_counters().wq_lockups;
  for (auto& w : items)
    ASSERT_TRUE(wq.queue_on(cpu0(), *w));
  wq.flush();
  EXPECT_EQ(ran.load(), n);
  EXPECT_EQ(get_watchdog_counters().wq_lockups - before, 0u)
      << "a pool that kept starting items was reported locked up";
  EXPECT_EQ(capture.count("BUG: workqueue lockup"), 0u);
}

TEST(Watchdog, ConfigIsValidated) {
  watchdog_config c;
  c.tick = 0ms;
  EXPECT_THROW(set_watchdog_config(c), std::invalid_argument);
  c = {};
  c.wq_lockup = -1ms;
  EXPECT_THROW(set_watchdog_config(c), std::invalid_argument);
  c = {};
  c.wq_cpu_intensive_warning = 0;
  EXPECT_THROW(set_watchdog_config(c), std::invalid_argument);
  EXPECT_EQ(get_watchdog_config().wq_lockup, 30s);
  EXPECT_EQ(get_watchdog_config().wq_cpu_intensive, 10ms);
}

TEST(Watchdog, ScopedConfigRestoresThePreviousOneOnEveryWayOut) {
  const watchdog_config before = get_watchdog_config();
  watchdog_config c = before;
  c.wq_lockup = before.wq_lockup + 7s;
  {
    scoped_watchdog_config scoped(c);
    EXPECT_EQ(get_watchdog_config().wq_lockup, before.wq_lockup + 7s);
  }
  EXPECT_EQ(get_watchdog_config().wq_lockup, before.wq_lockup);
  try {
    scoped_watchdog_config scoped(c);
    throw std::runtime_error("leaves the scope");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(get_watchdog_config().wq_lockup, before.wq_lockup);
  c.tick = 0s;  // invalid: nothing is changed, nothing to restore
  EXPECT_THROW(scoped_watchdog_config{c}, std::invalid_argument);
  EXPECT_EQ(get_watchdog_config().tick, before.tick);
}

TEST(Watchdog, RegisteredChecksRunUntilUnregistered) {
  std::atomic<int> runs{0};
  {
    detail::watchdog_registration r =
        detail::watchdog_register("test", [&](std::uint64_t, const watchdog_config&) { ++runs; });
    detail::watchdog_hold();
    EXPECT_TRUE(eventually([&] { return runs.load() >= 3; }));
    detail::watchdog_release();
  }
  const int after = runs.load();
  detail::watchdog_hold();
  // Another registration proves ticks continue; the removed check must not run again.
  std::atomic<int> other{0};
  detail::watchdog_registration r2 =
      detail::watchdog_register("other", [&](std::uint64_t, const watchdog_config&) { ++other; });
  EXPECT_TRUE(eventually([&] { return other.load() >= 3; }));
  detail::watchdog_release();
  EXPECT_EQ(runs.load(), after);
}

}  // namespace
}  // namespace quiesce
