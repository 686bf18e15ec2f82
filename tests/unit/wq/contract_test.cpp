// SPDX-License-Identifier: Apache-2.0
// Regression tests for the workqueue contract: cancel_sync's "disable" window, drain and
// flush races, quiesce's own waits acting as may_block, call-outs without runtime locks,
// saturated deadlines, draining queues and delayed work, exception safety of call-outs,
// and cross-pool non-reentrancy. Tests that would deadlock on a broken build run their
// scenario under finishes_or_abort, so the process dies loudly instead of hanging.
#include <gtest/gtest.h>

#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cpus.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::finishes_or_abort;
using test::gate;
using test::generous;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int race_iterations = 300;
#else
constexpr int race_iterations = 3000;
#endif

using test::first_cpu;

// Whether thread `tid` (which set `calling` just before a blocking call) now sleeps in it.
bool sleeps_in_call(const std::atomic<bool>& calling, const std::atomic<pid_t>& tid) {
  return calling.load() && test::thread_state(tid.load()) == 'S';
}

// Restores the kernel's idle worker timeout at the end of a test, also on early returns.
struct idle_timeout_restorer {
  ~idle_timeout_restorer() { set_worker_idle_timeout(300s); }
};

// CPU time the whole process used over ~`window` of wall time during which the calling
// thread waits on a condition variable, as a fraction of that wall time.
double process_cpu_share_over(std::chrono::milliseconds window) {
  auto process_cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
  };
  std::mutex lock;
  std::condition_variable cv;
  const std::uint64_t cpu0 = process_cpu_ns();
  const std::uint64_t wall0 = now_ns();
  {
    std::unique_lock guard(lock);
    cv.wait_for(guard, window, [] { return false; });  // nothing signals: a measurement window
  }
  const std::uint64_t cpu = process_cpu_ns() - cpu0;
  const std::uint64_t wall = now_ns() - wall0;
  return static_cast<double>(cpu) / static_cast<double>(wall);
}

// A watchdog that neither notices sleeping workers nor marks CPU hogs: only may_block (or
// something acting as it) lets a per-CPU pool start another worker.
watchdog_config no_rescue_config() {
  watchdog_config c = get_watchdog_config();
  c.wq_sleep_detection = false;
  c.wq_cpu_intensive = 0ns;
  return c;
}

// ---- 1. cancel_sync disables the item while it waits ----------------------------------

// A periodic item re-arms itself from its function; cancel_sync() is called while it runs.
void check_cancel_sync_stops_self_rearming(workqueue& wq, bool use_mod_delayed) {
  std::atomic<int> runs{0};
  std::atomic<bool> rearm{true};
  std::atomic<bool> calling{false};
  std::atomic<pid_t> canceller{0};
  std::atomic<int> rearm_result{-1};  // the re-arm made while cancel_sync waits
  gate third_started;
  delayed_work x("self_rearming", [&](work& self) {
    auto& d = static_cast<delayed_work&>(self);
    const int n = ++runs;
    if (!rearm.load()) return;
    if (n == 3) {
      third_started.open();
      {
        may_block blocking;  // re-arm only once cancel_sync waits for this very execution
        EXPECT_TRUE(eventually([&] { return sleeps_in_call(calling, canceller); }));
      }
      rearm_result = use_mod_delayed ? wq.mod_delayed(d, 1ms) : wq.queue_delayed(d, 1ms);
      return;
    }
    if (use_mod_delayed) {
      wq.mod_delayed(d, 1ms);
    } else {
      wq.queue_delayed(d, 1ms);
    }
  });
  ASSERT_TRUE(wq.queue_delayed(x, 1ms));
  finishes_or_abort(
      [&] {
        EXPECT_TRUE(third_started.wait());
        canceller = this_thread_tid();
        calling = true;
        x.cancel_sync();
      },
      generous, "cancel_sync() of a self-re-arming delayed_work");
  const int after = runs.load();
  EXPECT_EQ(after, 3);
  EXPECT_FALSE(x.pending());
  wq.flush();  // anything queued by the cancelled execution would run by now
  EXPECT_EQ(runs.load(), after) << "ran again after cancel_sync returned";
  EXPECT_FALSE(x.pending()) << "re-armed after cancel_sync returned";
  // While disabled: queue_delayed is refused (false); mod_delayed queues nothing but
  // returns true (it returns false only when it creates an instance).
  EXPECT_EQ(rearm_result.load(), use_mod_delayed ? 1 : 0);
  rearm = false;
  ASSERT_TRUE(wq.queue(x));  // enabled again
  x.flush();
  EXPECT_EQ(runs.load(), after + 1);
  EXPECT_FALSE(x.pending());
}

// Guards against mod_delayed() checking the disable count only before it owns the pending
// bit: a cancel_sync() that begins in between returned with the item armed again (found in
// review). Races cancel_sync() against an item that re-arms itself at once, many times;
// after cancel_sync() returns nobody may queue the item, so it must be idle and stay idle.
TEST(WqContract, CancelSyncRacingASelfRearmingItemLeavesItIdle) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int rounds = 100;
#else
  constexpr int rounds = 1000;
#endif
  workqueue wq("rearm-race");
  std::atomic<int> runs{0};
  delayed_work x("rearm_at_once", [&](work& self) {
    ++runs;
    wq.mod_delayed(static_cast<delayed_work&>(self), std::chrono::nanoseconds::zero());
  });
  for (int round = 0; round < rounds; ++round) {
    ASSERT_TRUE(wq.queue(x));
    const int seen = runs.load();
    ASSERT_TRUE(eventually([&] { return runs.load() > seen + round % 3; }));
    x.cancel_sync();
    ASSERT_FALSE(x.pending()) << "round " << round << ": re-armed after cancel_sync returned";
    const int after = runs.load();
    wq.flush();
    ASSERT_EQ(runs.load(), after) << "round " << round << ": ran after cancel_sync returned";
  }
}

// Guards against mod_delayed() from the item's own function waiting for the canceller
// (which waits for the item): a deadlock.
TEST(WqContract, CancelSyncStopsItemRearmingWithModDelayedOnBoundQueue) {
  workqueue wq("rearm-mod");
  check_cancel_sync_stops_self_rearming(wq, /*use_mod_delayed=*/true);
}

// Guards against the same deadlock on the shared system queue.
TEST(WqContract, CancelSyncStopsItemRearmingWithModDelayedOnSystemWq) {
  check_cancel_sync_stops_self_rearming(system_wq(), /*use_mod_delayed=*/true);
}

// Guards against a re-arm by queue_delayed() surviving cancel_sync().
TEST(WqContract, CancelSyncStopsItemRearmingWithQueueDelayedOnBoundQueue) {
  workqueue wq("rearm-queue");
  check_cancel_sync_stops_self_rearming(wq, /*use_mod_delayed=*/false);
}

// Guards against a re-arm by queue_delayed() surviving cancel_sync() on system_wq.
TEST(WqContract, CancelSyncStopsItemRearmingWithQueueDelayedOnSystemWq) {
  check_cancel_sync_stops_self_rearming(system_wq(), /*use_mod_delayed=*/false);
}

// Guards against cancel()/mod_delayed() blocking until another thread's cancel_sync()
// (which waits for the running instance) has finished.
TEST(WqContract, CancelAndQueueDuringCancelSyncReturnAtOnceAndQueueNothing) {
  workqueue wq("disable");
  gate started, release;
  std::atomic<int> runs{0};
  delayed_work x("blocked", [&](work&) {
    ++runs;
    started.open();
    may_block blocking;
    release.wait(2 * generous);  // longer than finishes_or_abort's deadline
  });
  ASSERT_TRUE(wq.queue_on(first_cpu(), x));
  ASSERT_TRUE(started.wait());
  std::atomic<bool> calling{false}, returned{false}, was_pending{true};
  std::atomic<pid_t> canceller{0};
  std::thread t([&] {
    canceller = this_thread_tid();
    calling = true;
    was_pending = x.cancel_sync();
    returned = true;
  });
  EXPECT_TRUE(eventually([&] { return sleeps_in_call(calling, canceller); }));
  finishes_or_abort([&] { EXPECT_FALSE(x.cancel()); }, generous,
                    "work::cancel() during another thread's cancel_sync()");
  EXPECT_FALSE(wq.queue(x));
  EXPECT_FALSE(wq.queue_on(first_cpu(), x));
  EXPECT_FALSE(wq.queue_delayed(x, 1ms));
  finishes_or_abort([&] { EXPECT_TRUE(wq.mod_delayed(x, 1ms)); }, generous,
                    "mod_delayed() during another thread's cancel_sync()");
  EXPECT_FALSE(x.pending());
  EXPECT_FALSE(returned.load());
  release.open();
  t.join();
  EXPECT_FALSE(was_pending.load());
  EXPECT_FALSE(x.pending());
  wq.flush();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(wq.stats().executed, 1u);
}

// Guards against an item's cancel() of itself waiting for the cancel_sync() that waits for
// the item: a deadlock.
TEST(WqContract, ItemCancellingItselfDuringCancelSyncDoesNotDeadlock) {
  workqueue wq("selfcancel");
  std::atomic<bool> calling{false};
  std::atomic<pid_t> canceller{0};
  std::atomic<int> result{-1};
  gate started;
  work x("self_cancel", [&](work& self) {
    started.open();
    {
      may_block blocking;
      EXPECT_TRUE(eventually([&] { return sleeps_in_call(calling, canceller); }));
    }
    result = self.cancel();
  });
  ASSERT_TRUE(wq.queue(x));
  finishes_or_abort(
      [&] {
        EXPECT_TRUE(started.wait());
        canceller = this_thread_tid();
        calling = true;
        x.cancel_sync();
      },
      generous, "cancel_sync() of an item that cancels itself");
  EXPECT_EQ(result.load(), 0);
  EXPECT_FALSE(x.pending());
}

// ---- 2/3. drain and flush races --------------------------------------------------------

// Guards against drain() (and so ~workqueue) returning between the timer taking a delayed
// item off its list and queueing it: the item would run on a destroyed queue.
TEST(WqContract, DestroyingAQueueWaitsForADelayedItemFiringIntoIt) {
  for (int i = 0; i < race_iterations; ++i) {
    std::atomic<int> runs{0};
    auto d = std::make_unique<delayed_work>("firing", [&runs](work&) { ++runs; });
    {
      workqueue wq("timer-race");
      ASSERT_TRUE(wq.queue_delayed(*d, std::chrono::microseconds(i % 51)));
    }
    const int ran = runs.load();
    const bool pending = d->pending();
    if (ran != 1 || pending) {
      ADD_FAILURE() << "iteration " << i << ": after ~workqueue the item ran " << ran
                    << " times, pending=" << pending;
      (void)d.release();  // it may still be queued on the destroyed queue: never destroy it
      return;
    }
  }
}

// Guards against flush() missing an item queued before it when other threads flush at the
// same time (a queueing that read the old flush color and counted itself in after the
// previous flush had checked that color).
TEST(WqContract, FlushWaitsForEveryItemQueuedBeforeIt) {
  workqueue wq("flush-race");
  constexpr int flushers = 3;
  struct slot {
    std::atomic<std::uint64_t> finished{0};
    std::unique_ptr<work> item;
  };
  std::vector<slot> slots(flushers);
  for (auto& s : slots) {
    s.item = std::make_unique<work>("flushed", [&s](work&) { s.finished.fetch_add(1); });
  }
  std::vector<std::unique_ptr<work>> churn;
  for (int i = 0; i < 4; ++i)
    churn.push_back(std::make_unique<work>("churn", [](work&) {}));
  std::atomic<bool> stop{false};
  std::atomic<int> missed{0}, still_pending{0};
  // Keeps flush colors turning over; yields between rounds so that on two loaded CPUs it
  // does not starve the flushers (the test then ran past the mutants' 15 s deadline).
  std::thread churner([&] {
    while (!stop.load()) {
      for (auto& c : churn)
        wq.queue(*c);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < flushers; ++t) {
    threads.emplace_back([&, t] {
      slot& s = slots[static_cast<std::size_t>(t)];
      for (int i = 0; i < race_iterations; ++i) {
        const std::uint64_t before = s.finished.load();
        if (!wq.queue(*s.item)) {  // the previous flush returned while it was still pending
          ++still_pending;
          s.item->flush();
          continue;
        }
        wq.flush();
        if (s.finished.load() == before) ++missed;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  stop = true;
  churner.join();
  wq.flush();
  EXPECT_EQ(missed.load(), 0) << "flush() returned before an item queued before it had run, in "
                              << missed.load() << " of " << flushers * race_iterations;
  EXPECT_EQ(still_pending.load(), 0);
}

// Guards against work::flush() waiting only for a running instance and not for a pending
// one.
TEST(WqContract, WorkFlushWaitsForAPendingInstance) {
  workqueue wq("flush-pending", wq_options{.ordered = true});
  gate release;
  std::atomic<bool> ran{false};
  work blocker("blocker", [&](work&) { release.wait(); });
  work item("item", [&](work&) { ran = true; });
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(wq.queue(item));  // inactive behind the blocker: pending, not running
  std::atomic<bool> calling{false}, returned{false}, flushed{false}, ran_at_return{false};
  std::atomic<pid_t> flusher_tid{0};
  std::thread flusher([&] {
    flusher_tid = this_thread_tid();
    calling = true;
    flushed = item.flush();
    ran_at_return = ran.load();
    returned = true;
  });
  EXPECT_TRUE(eventually([&] { return returned.load() || sleeps_in_call(calling, flusher_tid); }));
  release.open();
  flusher.join();
  EXPECT_TRUE(flushed.load());
  EXPECT_TRUE(ran_at_return.load()) << "flush() returned while the item was still pending";
  wq.flush();
}

// ---- 6. quiesce's own blocking waits act as may_block ----------------------------------

// An item A on CPU c of a bound queue queues B on CPU c (through `b_queue`), then calls
// `wait`, which returns only once B has run: A's worker must stop counting as running for
// the wait, or B never starts (the watchdog's rescue is off).
void expect_wait_lets_its_cpu_run(workqueue& b_queue, const std::function<void(work& b)>& wait,
                                  const char* what) {
  scoped_watchdog_config no_rescue(no_rescue_config());
  workqueue wq("waiter");
  const int c = first_cpu();
  std::atomic<bool> b_ran{false}, b_ran_when_waited{false};
  work b("b", [&](work&) { b_ran = true; });
  work a("a", [&](work&) {
    EXPECT_TRUE(b_queue.queue_on(c, b));
    wait(b);
    b_ran_when_waited = b_ran.load();
  });
  finishes_or_abort(
      [&] {
        ASSERT_TRUE(wq.queue_on(c, a));
        a.flush();
        b.flush();
      },
      generous, what);
  EXPECT_TRUE(b_ran_when_waited.load());
}

// Guards against work::flush() from an item keeping its per-CPU worker counted as
// running: the flushed item, queued behind it on the same CPU, could never start.
TEST(WqContract, FlushOfAnItemOnTheSameCpuActsAsMayBlock) {
  workqueue other("flushed");
  expect_wait_lets_its_cpu_run(
      other, [](work& b) { b.flush(); }, "an item's flush() of an item queued on its CPU");
}

// Guards against workqueue::flush() of another queue from an item not acting as may_block.
TEST(WqContract, FlushOfAnotherQueueActsAsMayBlock) {
  workqueue other("flushed");
  expect_wait_lets_its_cpu_run(
      other, [&](work&) { other.flush(); },
      "an item's flush() of another queue with an item on its CPU");
}

// Guards against cancel_sync() from an item not acting as may_block: the item it waits for
// (running elsewhere) waits for an item queued on the waiter's CPU.
TEST(WqContract, CancelSyncActsAsMayBlock) {
  scoped_watchdog_config no_rescue(no_rescue_config());
  workqueue wq("canceller");
  workqueue elsewhere("elsewhere", wq_options{.unbound = true});
  const int c = first_cpu();
  gate r_started, b_ran;
  std::atomic<bool> b_ran_when_cancelled{false};
  work b("b", [&](work&) { b_ran.open(); });
  work r("r", [&](work&) {
    r_started.open();
    may_block blocking;
    EXPECT_TRUE(b_ran.wait(2 * generous));  // longer than finishes_or_abort's deadline
  });
  work a("a", [&](work&) {
    EXPECT_TRUE(wq.queue_on(c, b));
    r.cancel_sync();
    b_ran_when_cancelled = b_ran.is_open();
  });
  finishes_or_abort(
      [&] {
        ASSERT_TRUE(elsewhere.queue(r));
        ASSERT_TRUE(r_started.wait());
        ASSERT_TRUE(wq.queue_on(c, a));
        a.flush();
        b.flush();
      },
      generous, "an item's cancel_sync() of an item that waits for its CPU");
  EXPECT_TRUE(b_ran_when_cancelled.load());
}

// Guards against rcu_synchronize() from an item not acting as may_block: the reader it
// waits for is released only once an item queued on the waiter's CPU has run.
TEST(WqContract, RcuSynchronizeActsAsMayBlock) {
  scoped_watchdog_config no_rescue(no_rescue_config());
  workqueue wq("rcu-sync");
  const int c = first_cpu();
  gate b_ran;
  std::atomic<bool> synchronized{false};
  work b("b", [&](work&) { b_ran.open(); });
  work a("a", [&](work&) {
    EXPECT_TRUE(wq.queue_on(c, b));
    rcu_synchronize();
    synchronized = true;
  });
  finishes_or_abort(
      [&] {
        rcu_default_domain().lock();
        const bool queued = wq.queue_on(c, a);
        EXPECT_TRUE(queued);
        if (queued) {
          EXPECT_TRUE(b_ran.wait(2 * generous));
        }
        rcu_default_domain().unlock();
        a.flush();
        b.flush();
      },
      generous, "an item's rcu_synchronize() waiting for a reader that waits for its CPU");
  EXPECT_TRUE(synchronized.load());
}

// Guards against rcu_barrier() from an item not acting as may_block.
TEST(WqContract, RcuBarrierActsAsMayBlock) {
  scoped_watchdog_config no_rescue(no_rescue_config());
  workqueue wq("rcu-barrier");
  const int c = first_cpu();
  gate b_ran;
  std::atomic<bool> callback_ran{false}, ran_at_barrier{false};
  work b("b", [&](work&) { b_ran.open(); });
  work a("a", [&](work&) {
    EXPECT_TRUE(wq.queue_on(c, b));
    rcu_barrier();
    ran_at_barrier = callback_ran.load();
  });
  finishes_or_abort(
      [&] {
        rcu_default_domain().lock();
        rcu_call(rcu_default_domain(), [&] { callback_ran = true; });  // needs our reader gone
        const bool queued = wq.queue_on(c, a);
        EXPECT_TRUE(queued);
        if (queued) {
          EXPECT_TRUE(b_ran.wait(2 * generous));
        }
        rcu_default_domain().unlock();
        a.flush();
        b.flush();
      },
      generous, "an item's rcu_barrier() waiting for a reader that waits for its CPU");
  EXPECT_TRUE(ran_at_barrier.load());
}

// ---- 7. no call-out with a runtime lock held -------------------------------------------

// Guards against the watchdog calling the log sink with the pool lock held: a sink that
// queues work on that pool would deadlock the watchdog and the pool.
TEST(WqContract, LogSinkMayQueueWorkOnThePoolBeingReported) {
  scoped_watchdog_config cfg({.tick = 1ms, .wq_cpu_intensive = 5ms, .wq_cpu_intensive_warning = 1});
  const int c = first_cpu();
  std::atomic<int> log_items_run{0};
  std::atomic<bool> hog_line_seen{false};
  work log_item("log_item", [&](work&) { ++log_items_run; });
  log_sink previous = set_log_sink([&](log_level, std::string_view line) {
    if (line.find("contract_log_hog hogged CPU") != std::string_view::npos) hog_line_seen = true;
    system_wq().queue_on(c, log_item);
  });
  workqueue wq("hog-sink");
  work hog("contract_log_hog", [&](work&) {
    const std::uint64_t start = thread_cpu_ns();
    const std::uint64_t end = now_ns() + 30'000'000'000u;
    while ((thread_cpu_ns() - start < 20'000'000u || !hog_line_seen.load()) && now_ns() < end) {
    }
  });
  std::atomic<bool> after_ran{false};
  work after("after_hog", [&](work&) { after_ran = true; });
  finishes_or_abort(
      [&] {
        ASSERT_TRUE(wq.queue_on(c, hog));
        hog.flush();
        EXPECT_TRUE(hog_line_seen.load());
        EXPECT_TRUE(eventually([&] { return log_items_run.load() > 0; }));
        ASSERT_TRUE(wq.queue_on(c, after));
        after.flush();
      },
      generous, "a watchdog hog report through a sink that queues work on the hog's pool");
  set_log_sink(std::move(previous));
  log_item.flush();
  EXPECT_TRUE(after_ran.load());
}

// ---- 8. saturated deadlines ------------------------------------------------------------

int workers_of_cpu(int cpu, bool idle) {
  for (const pool_info& p : worker_pools()) {
    if (p.bound && p.cpus == std::to_string(cpu) && p.nice == 0) {
      return idle ? p.nr_idle : p.nr_workers;
    }
  }
  return -1;
}

// Guards against idle workers keeping the deadline they started sleeping with when the
// idle timeout is shortened (they slept on for the old 300 s).
TEST(WqContract, ShorterIdleTimeoutCullsWorkersAlreadyIdle) {
  idle_timeout_restorer restore;
  set_worker_idle_timeout(300s);
  const int c = first_cpu();
  workqueue wq("cull-later");
  gate release;
  std::atomic<int> inside{0};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < 6; ++i) {
    items.push_back(std::make_unique<work>("spawn", [&](work&) {
      ++inside;
      may_block blocking;
      release.wait();
    }));
  }
  for (auto& w : items)
    ASSERT_TRUE(wq.queue_on(c, *w));
  ASSERT_TRUE(eventually([&] { return inside.load() == 6; }));
  release.open();
  wq.flush();
  // All idle (sleeping with the 300 s timeout) before it is shortened.
  ASSERT_TRUE(eventually([&] {
    return workers_of_cpu(c, false) >= 6 && workers_of_cpu(c, true) == workers_of_cpu(c, false);
  }));
  set_worker_idle_timeout(5ms);
  EXPECT_TRUE(eventually([&] { return workers_of_cpu(c, false) == 2; }))
      << workers_of_cpu(c, false);
}

// Guards against a huge idle timeout overflowing the wait's deadline: idle workers would
// spin instead of sleeping.
TEST(WqContract, MaximalIdleTimeoutIsAcceptedAndIdleWorkersSleep) {
  idle_timeout_restorer restore;
  workqueue wq("idle-max");
  for (int cpu : system_topology().cpus()) {  // an idle worker on every CPU's pool
    work w("wake", [](work&) {});
    ASSERT_TRUE(wq.queue_on(cpu, w));
    w.flush();
  }
  EXPECT_NO_THROW(set_worker_idle_timeout(std::chrono::nanoseconds::max()));
  const double share = process_cpu_share_over(300ms);
  EXPECT_LT(share, 0.5) << "idle workers burn CPU with an infinite idle timeout";
}

// Guards against a huge delay overflowing the timer's deadline: the item would fire at
// once, or the timer thread would spin.
TEST(WqContract, MaximalDelayIsAcceptedAndTheTimerSleeps) {
  idle_timeout_restorer restore;
  workqueue wq("delay-max");
  std::atomic<int> runs{0};
  delayed_work w("never", [&](work&) { ++runs; });
  finishes_or_abort(
      [&] {
        EXPECT_TRUE(wq.queue_delayed(w, std::chrono::nanoseconds::max()));
        EXPECT_TRUE(w.pending());
        const double share = process_cpu_share_over(300ms);
        EXPECT_LT(share, 0.5) << "the timer thread burns CPU for an item armed for ever";
        EXPECT_TRUE(w.pending());
        EXPECT_EQ(runs.load(), 0);
        EXPECT_TRUE(w.cancel());  // the timer's lock must not be starved by a spinning timer
        EXPECT_FALSE(w.pending());
      },
      generous, "an item queued with the maximal delay");
}

// ---- 9. a draining queue refuses outside delayed work ----------------------------------

// Guards against delayed work from outside slipping into a draining queue through the
// timer (which a draining queue accepts for its own items).
TEST(WqContract, DrainingQueueRefusesDelayedWorkFromOutside) {
  workqueue wq("drain-delayed");
  gate started, release;
  std::atomic<int> chained_runs{0}, outsider_runs{0}, member_result{-1};
  delayed_work chained("chained", [&](work&) { ++chained_runs; });
  delayed_work outsider("outsider", [&](work&) { ++outsider_runs; });
  work member("member", [&](work&) {
    started.open();
    {
      may_block blocking;
      release.wait();
    }
    member_result = wq.queue_delayed(chained, 1ms);  // chained: accepted while draining
  });
  ASSERT_TRUE(wq.queue(member));
  ASSERT_TRUE(started.wait());
  std::thread drainer([&] { wq.drain(); });
  EXPECT_TRUE(eventually([&] { return wq.stats().draining; }));
  {
    log_capture capture;
    EXPECT_FALSE(wq.queue_delayed(outsider, 1ms));
    EXPECT_FALSE(outsider.pending());
    EXPECT_TRUE(wq.mod_delayed(outsider, 1ms));  // refused: no new instance
    EXPECT_FALSE(outsider.pending());
    EXPECT_EQ(wq.stats().rejected, 2u);
  }
  release.open();
  drainer.join();
  EXPECT_EQ(member_result.load(), 1);
  EXPECT_EQ(chained_runs.load(), 1) << "drain() returned before the chained delayed item ran";
  EXPECT_EQ(outsider_runs.load(), 0);
  EXPECT_FALSE(outsider.pending());
  EXPECT_FALSE(chained.pending());
}

// ---- 10. exception safety of call-outs -------------------------------------------------

// Sets a throwing sink and makes the runtime log a refusal (queueing from outside while
// draining). Leaks everything: the process is expected to die.
void refuse_with_throwing_sink() {
  set_log_sink([](log_level, std::string_view) { throw std::runtime_error("sink failure"); });
  auto* wq = new workqueue("throwing-sink");
  auto* started = new gate;
  auto* release = new gate;
  auto* blocker = new work("blocker", [started, release](work&) {
    started->open();
    may_block blocking;
    release->wait();
  });
  wq->queue(*blocker);
  started->wait();
  std::thread([wq] { wq->drain(); }).detach();
  if (!eventually([wq] { return wq->stats().draining; })) return;
  auto* outsider = new work("outsider", [](work&) {});
  wq->queue(*outsider);  // refused and logged: the sink throws
}

// Guards against an exception from the log sink escaping into the runtime (today it leaves
// the refused item's pending bit set for ever): a throwing sink terminates the process.
TEST(WqContractDeathTest, LogSinkThatThrowsTerminatesTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(refuse_with_throwing_sink(), "log sink threw");
}

// Guards against a refused queueing leaving the item's pending bit set.
TEST(WqContract, RefusedItemIsNotPending) {
  workqueue wq("refused");
  gate started, release;
  work blocker("blocker", [&](work&) {
    started.open();
    may_block blocking;
    release.wait();
  });
  work outsider("outsider", [](work&) {});
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(started.wait());
  std::thread drainer([&] { wq.drain(); });
  EXPECT_TRUE(eventually([&] { return wq.stats().draining; }));
  {
    log_capture capture;  // a sink that does not throw
    EXPECT_FALSE(wq.queue(outsider));
    EXPECT_FALSE(outsider.pending());
    EXPECT_FALSE(wq.queue_on(first_cpu(), outsider));
    EXPECT_FALSE(outsider.pending());
  }
  release.open();
  drainer.join();
  EXPECT_EQ(wq.stats().rejected, 2u);
}

// ---- cross-pool non-reentrancy ---------------------------------------------------------

// Guards against a new instance of a running item going to another CPU's pool (where it
// could run concurrently) instead of to the pool running it. Deterministic: the marker
// queued behind it on the other CPU proves that CPU has looked at its worklist.
TEST(WqContract, RequeueOnAnotherCpuOfARunningItemDoesNotStartThere) {
  const auto& cpus = system_topology().cpus().cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const int cpu0 = cpus[0], cpu1 = cpus[1];
  workqueue wq("xpool");
  gate first_started, release;
  std::atomic<int> inside{0}, overlaps{0}, runs{0};
  work x("xpool_item", [&](work&) {
    if (inside.fetch_add(1) != 0) ++overlaps;
    if (++runs == 1) {
      first_started.open();
      may_block blocking;
      release.wait();
    }
    inside.fetch_sub(1);
  });
  work marker("marker", [](work&) {});
  ASSERT_TRUE(wq.queue_on(cpu0, x));
  ASSERT_TRUE(first_started.wait());
  EXPECT_TRUE(wq.queue_on(cpu1, x));
  EXPECT_TRUE(wq.queue_on(cpu1, marker));
  marker.flush();
  EXPECT_EQ(runs.load(), 1) << "the second instance started while the first runs";
  EXPECT_EQ(inside.load(), 1);
  EXPECT_EQ(overlaps.load(), 0);
  release.open();
  x.flush();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(overlaps.load(), 0);
}

// Guards against the same bug where the other CPU's pool is busy: the new instance must
// be handed to the worker running the item (and so run on its CPU), not wait on the other
// CPU's worklist. Deterministic: the other pool is plugged by an item that blocks without
// may_block (sleep detection off) until the first instance has finished.
TEST(WqContract, RequeueOnAnotherCpuOfARunningItemRunsOnItsWorker) {
  const auto& cpus = system_topology().cpus().cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const int cpu0 = cpus[0], cpu1 = cpus[1];
  scoped_watchdog_config no_rescue(no_rescue_config());
  workqueue wq("xpool2");
  gate first_started, release, plug_started, unplug;
  std::atomic<int> runs{0}, second_cpu{-1};
  work x("xpool_item2", [&](work&) {
    if (++runs == 1) {
      first_started.open();
      may_block blocking;
      release.wait();
    } else {
      second_cpu = sched_getcpu();
    }
  });
  work plug("plug", [&](work&) {
    plug_started.open();
    unplug.wait();  // no may_block: CPU 1's pool runs nothing else meanwhile
  });
  ASSERT_TRUE(wq.queue_on(cpu0, x));
  ASSERT_TRUE(first_started.wait());
  ASSERT_TRUE(wq.queue_on(cpu1, plug));
  ASSERT_TRUE(plug_started.wait());
  EXPECT_TRUE(wq.queue_on(cpu1, x));
  auto pool_of_cpu0 = [&] {
    for (const pool_info& p : worker_pools()) {
      if (p.bound && p.cpus == std::to_string(cpu0) && p.nice == 0) return p;
    }
    return pool_info{};
  };
  // The second instance is handed to the first's worker once CPU 0's pool has looked.
  EXPECT_TRUE(eventually([&] { return pool_of_cpu0().nr_pending == 0; }));
  release.open();
  // CPU 0's pool is done (with both instances, if the second went there) before CPU 1's
  // pool may look at its worklist again.
  EXPECT_TRUE(eventually([&] {
    const pool_info p = pool_of_cpu0();
    return p.nr_workers > 0 && p.nr_idle == p.nr_workers;
  }));
  unplug.open();
  x.flush();
  plug.flush();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(second_cpu.load(), cpu0) << "the second instance ran on another CPU's pool";
}

}  // namespace
}  // namespace quiesce
