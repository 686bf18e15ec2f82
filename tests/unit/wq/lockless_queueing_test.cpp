// SPDX-License-Identifier: Apache-2.0
// The queueing path without the pool lock (src/wq/internal.hpp, "the queueing path takes no
// lock"): each of its four ordering arguments, raced on purpose.
//  - a push racing a worker going idle never strands the item (pool::queuer_must_kick);
//  - a queueing racing a flush's color flip is counted in a color some later flush waits
//    for (pwq::color);
//  - a queuer that finds a free active slot still runs after the items that wait inactive
//    (active_domain::fast_activation_allowed), so an ordered queue keeps its order;
//  - a queuer that found no slot and lists its item waiting looks for a slot once more, as
//    the last active item may have ended between its look and its listing without seeing
//    it wait (the Dekker pair of active_domain::nr_inactive).
// Each is killed by its mutant (tests/mutants): kick_checked_before_push,
// color_not_rechecked, active_skips_inactive, waiter_never_takes.
// And a normal-priority pool's worker that looks for work before it sleeps counts as on its
// way only while it looks (look_for_work): mutant look_leaves_waking.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::gate;

// Two CPUs of the topology, or none (a one-CPU machine cannot race two threads).
bool two_cpus(int& a, int& b) {
  const auto& cpus = system_topology().cpus().cpus();
  if (cpus.size() < 2) return false;
  a = cpus[0];
  b = cpus[1];
  return true;
}

TEST(LocklessQueueing, APushRacingAWorkerGoingIdleIsNeverLost) {
  int here = 0, there = 0;
  if (!two_cpus(here, there)) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(pin_this_thread(cpu_set{here}));
  workqueue wq("kick_race");
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> second_runs{0};
  // The first item spins until released, then returns: its worker stops counting as
  // running and looks at the lists at about the moment the second item is pushed.
  work first("first", [&](work&) {
    started.store(true);
    while (!release.load()) {
    }
  });
  work second("second", [&](work&) { second_runs.fetch_add(1); });
  work rescue("rescue", [](work&) {});
  constexpr int rounds = 3000;
  int lost = 0;
  for (int round = 0; round < rounds && lost == 0; ++round) {
    started = false;
    release = false;
    ASSERT_TRUE(wq.queue_on(there, first));
    ASSERT_TRUE(eventually([&] { return started.load(); }));
    release = true;
    ASSERT_TRUE(wq.queue_on(there, second));
    if (!eventually([&] { return second_runs.load() == round + 1; }, 10s)) {
      ++lost;
      wq.queue_on(there, rescue);  // its kick runs the stranded item too
    }
    first.flush();
    second.flush();
  }
  EXPECT_EQ(lost, 0) << "an item pushed as its pool's worker went idle never ran (a lost "
                        "wake-up)";
  rescue.flush();
}

// A worker of a normal-priority pool (per-CPU or unbound) that found no work looks for
// more before it sleeps, counted as on its way (queuers do not kick meanwhile). Once it has
// looked and gone to sleep, the next item must wake it: each round queues one item after
// the pool went idle (the pause lets the look end; the test passes whatever it lasts) and
// waits for it to run.
void queue_after_each_look(const wq_options& options, const char* kind) {
  workqueue wq("look", options);
  std::atomic<int> runs{0};
  work item("item", [&](work&) { runs.fetch_add(1); });
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(wq.queue(item));
    ASSERT_TRUE(eventually([&] { return runs.load() == round + 1; }, 10s))
        << "round " << round << ": an item queued to an idle " << kind << " pool never ran "
        << "(its worker looked for work and went to sleep still counted as on its way)";
    std::this_thread::sleep_for(2ms);
  }
}

TEST(LocklessQueueing, AnItemQueuedAfterAnUnboundWorkerLookedForWorkAndSleptRuns) {
  queue_after_each_look(wq_options{.unbound = true}, "unbound");
}

TEST(LocklessQueueing, AnItemQueuedAfterAPerCpuWorkerLookedForWorkAndSleptRuns) {
  queue_after_each_look(wq_options{}, "per-CPU");
}

// A per-CPU worker's look gives its CPU away between glances: a producer on that CPU that
// waits for each item it queues (a round trip, yielding as it waits) still gets every item
// run, in order, each exactly once - whether the worker found it looking or was woken.
TEST(LocklessQueueing, RoundTripsOnOneCpuRunEveryItemOnceInOrder) {
  const int cpu = system_topology().cpus().cpus().front();
  workqueue wq("look_trips");
  constexpr int trips = 5'000;
  std::atomic<int> last{-1};
  std::atomic<int> out_of_order{0};
  named_thread producer("producer", cpu_set{cpu}, [&] {
    for (int i = 0; i < trips; ++i) {
      std::atomic<bool> done{false};
      ASSERT_TRUE(wq.post_on(cpu, [&, i] {
        if (last.exchange(i) != i - 1) out_of_order.fetch_add(1);
        done.store(true);
      }));
      ASSERT_TRUE(eventually([&] { return done.load(); }, 10s))
          << "trip " << i << ": the item queued on the producer's own CPU never ran";
    }
  });
  producer.join();
  EXPECT_EQ(last.load(), trips - 1);
  EXPECT_EQ(out_of_order.load(), 0);
}

// One round: a queuer queues `n` items while a flusher on the same CPU flushes in a loop and
// checks after each flush that every item queued before it began has run. Returns the first
// item a flush did not wait for, or -1.
int color_race_round(int here, int there) {
  workqueue wq("color_race");
  constexpr int n = 2000;
  std::vector<std::atomic<bool>> done(n);
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < n; ++i) {
    // Short items: no backlog, so a flush that flips the color often finds the old one
    // empty and returns at once - the case where a miscounted item goes unwaited for.
    items.push_back(std::make_unique<work>(
        "colored", [&done, i](work&) { done[static_cast<std::size_t>(i)].store(true); }));
  }
  std::atomic<int> queued{0};
  std::atomic<int> first_early{-1};
  named_thread queuer("queuer", cpu_set{here}, [&] {
    for (int i = 0; i < n && first_early.load() < 0; ++i) {
      if (!wq.queue_on(there, *items[static_cast<std::size_t>(i)])) ADD_FAILURE() << "refused";
      queued.store(i + 1);
    }
    queued.store(n);  // (stopped early: the flusher's loop ends)
  });
  named_thread flusher("flusher", cpu_set{here}, [&] {
    int checked = 0;  // items below this were seen done after some flush
    while (checked < n && first_early.load() < 0) {
      const int before = queued.load();
      wq.flush();
      for (int i = checked; i < before; ++i) {
        if (!done[static_cast<std::size_t>(i)].load()) {
          first_early = i;
          break;
        }
      }
      checked = std::max(checked, before);
    }
  });
  queuer.join();
  flusher.join();
  wq.flush();
  return first_early.load();
}

TEST(LocklessQueueing, AFlushWaitsForAnItemQueuedAcrossAColorFlip) {
  int here = 0, there = 0;
  if (!two_cpus(here, there)) GTEST_SKIP() << "needs two CPUs";
  // The queuer and the flusher share one CPU, so the flusher runs while the queuer is
  // anywhere inside queue_on(); the items run on the other CPU. Every item whose
  // queue_on() returned before a flush began has run when that flush returns.
  for (int round = 0; round < 20; ++round) {
    const int early = color_race_round(here, there);
    ASSERT_EQ(early, -1) << "workqueue::flush() returned before item " << early
                         << ", queued before it began, had run (round " << round << ")";
  }
}

TEST(LocklessQueueing, AFlushWaitsForARunningItemWhileQueuersCountAndUncountInItsColor) {
  // An item runs (blocked) in the color a flush waits for, while a queuer keeps queueing:
  // one that read the color before the flip counts in the old color and then uncounts,
  // raising the old color's end count for an item that never ran. The flush must still
  // wait for the running item (pwq::any_in_flight reads the end count first).
  workqueue wq("flight_race", wq_options{.unbound = true});
  gate running, release;
  work blocked("blocked", [&](work&) {
    running.open();
    release.wait();
  });
  ASSERT_TRUE(wq.queue(blocked));
  ASSERT_TRUE(running.wait());
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<work>> ring;
  for (int i = 0; i < 64; ++i)
    ring.push_back(std::make_unique<work>("racer", [](work&) {}));
  std::thread queuer([&] {
    for (std::size_t i = 0; !stop.load(); ++i)
      wq.queue(*ring[i % ring.size()]);  // refused while still pending: fine
  });
  std::atomic<int> flushes_returned{0};
  std::thread flusher([&] {
    for (int i = 0; i < 50 && !stop.load(); ++i) {
      wq.flush();
      flushes_returned.fetch_add(1);
    }
  });
  // No flush can return while the item runs; give a wrong one every chance to.
  const bool returned_early = eventually([&] { return flushes_returned.load() > 0; }, 2s);
  release.open();
  stop = true;
  flusher.join();
  queuer.join();
  wq.flush();
  EXPECT_FALSE(returned_early) << "workqueue::flush() returned while an item queued before it "
                                  "was still running";
}

TEST(LocklessQueueing, AnOrderedQueueKeepsItsOrderUnderABacklog) {
  workqueue wq("ordered_backlog", wq_options{.ordered = true});
  constexpr int n = 200000;
  std::atomic<int> next{0};
  std::atomic<int> out_of_order{0};
  std::atomic<int> first_bad{-1};
  for (int i = 0; i < n; ++i) {
    wq.post([&, i] {
      // One at a time, so `next` needs no more than a relaxed read-modify-write.
      if (next.exchange(i + 1, std::memory_order_relaxed) != i) {
        if (out_of_order.fetch_add(1) == 0) first_bad = i;
      }
    });
  }
  wq.flush();
  EXPECT_EQ(next.load(), n);
  EXPECT_EQ(out_of_order.load(), 0)
      << "an ordered queue ran item " << first_bad.load() << " out of its queueing order";
  EXPECT_EQ(wq.stats().peak_active, 1);
}

// The queuer's side of the Dekker pair: an item queued to a queue of max_active 1 as its one
// active item ends. The queuer finds the slot taken, and the item, ending, may give it back
// and read that nothing waits before the queuer lists its own: then only the queuer's second
// look (after its count) finds the free slot. The watchdog's sweep of stranded items would
// hide a missing look within a tick, so it is held off for the test: a tick of an hour, and
// no check with a threshold that would shorten it (watchdog_config::tick).
TEST(LocklessQueueing, AnItemListedWaitingAsTheLastActiveOneEndsStartsWithoutTheWatchdog) {
  const watchdog_config saved = get_watchdog_config();
  watchdog_config cfg = saved;
  cfg.tick = std::chrono::hours(1);
  cfg.wq_lockup = cfg.wq_cpu_intensive = cfg.rcu_stall = cfg.rcu_tasks_stall = cfg.rcu_tasks_info =
      cfg.hung_task = std::chrono::nanoseconds::zero();
  scoped_watchdog_config no_sweeps(cfg);
  workqueue wq("waiter_looks",
               wq_options{.unbound = true, .max_active = 1, .scope = affinity_scope::system});
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> behind_runs{0};
  work first("first", [&](work&) {
    started.store(true);
    while (!release.load()) {
    }
  });
  work behind("behind", [&](work&) { behind_runs.fetch_add(1); });
  constexpr int rounds = 300;
  int stranded = 0;
  for (int round = 0; round < rounds && stranded == 0; ++round) {
    started = false;
    release = false;
    ASSERT_TRUE(wq.queue(first));
    ASSERT_TRUE(eventually([&] { return started.load(); }));
    release = true;  // it ends about as `behind` is queued
    ASSERT_TRUE(wq.queue(behind));
    if (!eventually([&] { return behind_runs.load() == round + 1; }, 10s)) ++stranded;
    if (stranded == 0) {
      first.flush();
      behind.flush();
    }
  }
  EXPECT_EQ(stranded, 0) << "an item listed waiting as the last active item ended never "
                            "started (its queuer did not look for the freed slot again)";
  if (stranded != 0) {
    set_watchdog_config(saved);  // the sweep rescues the stranded item, so that it can end
    behind.flush();
  }
}

}  // namespace
}  // namespace quiesce
