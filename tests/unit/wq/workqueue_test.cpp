// SPDX-License-Identifier: Apache-2.0
#include "quiesce/workqueue.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../../src/wq/completion.hpp"
#include "../../../src/wq/internal.hpp"
#include "cpus.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/trace.hpp"
#include "quiesce/watchdog.hpp"
#include "wait.hpp"

// A plain function with an exported symbol: its work item is named after it.
void key_garbage_collector(quiesce::work&) {}

namespace quiesce {
namespace {

using test::eventually;
using test::gate;
using namespace std::chrono_literals;

using test::first_cpu;
using test::last_cpu;

TEST(Workqueue, RunsQueuedItemsAndCountsThem) {
  workqueue wq("basic");
  std::atomic<int> runs{0};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < 100; ++i)
    items.push_back(std::make_unique<work>("count", [&](work&) { ++runs; }));
  for (auto& w : items)
    EXPECT_TRUE(wq.queue(*w));
  wq.flush();
  EXPECT_EQ(runs.load(), 100);
  const wq_stats s = wq.stats();
  EXPECT_EQ(s.name, "basic");
  EXPECT_EQ(s.queued, 100u);
  EXPECT_EQ(s.executed, 100u);
  EXPECT_EQ(s.queue_to_start_ns.count(), 100u);
  EXPECT_EQ(s.run_ns.count(), 100u);
  EXPECT_EQ(s.max_active, 1024);
}

// Every recorded wait and run lies within what the caller saw (stat_ns() around it all):
// an item queued to an idle worker (its start read from the clock) and one queued while
// the item before it ran (its start the end of that one: item_start_ns, src/wq/worker.cpp).
TEST(WorkqueueStats, WaitsAndRunsLieWithinTheCallersView) {
  for (const bool unbound : {false, true}) {
    workqueue wq("stat-times", {.unbound = unbound});
    gate release;
    std::atomic<bool> first_running{false};
    work first("first", [&](work&) {
      first_running = true;
      release.wait();
    });
    work second("second", [](work&) {});
    work later("later", [](work&) {});
    // Bound: all three on CPU 0's worker. Unbound: `second` may start on another worker.
    const auto queue = [&](work& w) { return unbound ? wq.queue(w) : wq.queue_on(0, w); };
    const std::uint64_t t0 = stat_ns();
    ASSERT_TRUE(queue(first));
    ASSERT_TRUE(eventually([&] { return first_running.load(); }));
    ASSERT_TRUE(queue(second));  // waits for `first`: starts at its end
    release.open();
    first.flush();  // unbound, `second` may have ended before it
    second.flush();
    ASSERT_TRUE(queue(later));  // the worker is done: a start of its own
    later.flush();
    const std::uint64_t wall = stat_ns() - t0;
    const wq_stats s = wq.stats();
    ASSERT_EQ(s.executed, 3u) << (unbound ? "unbound" : "bound");
    EXPECT_LE(s.queue_to_start_ns.max(), wall) << (unbound ? "unbound" : "bound");
    EXPECT_LE(s.run_ns.max(), wall) << (unbound ? "unbound" : "bound");
  }
}

// The kernel lets a work function free its own work_struct; so does quiesce: the runtime
// never touches the item once its function returned (ASan, in the sanitizer preset, reports
// any touch of the freed item). Bound and unbound, with tracing on (the end event uses the
// item's address and name, not the item), and one that throws after destroying itself.
TEST(Workqueue, AnItemMayDestroyItselfAsItsLastAction) {
  trace::enable();
  for (const wq_options& o : {wq_options{}, wq_options{.unbound = true}}) {
    workqueue wq("self_destroy", o);
    std::atomic<int> ran{0};
    constexpr int n = 500;
    for (int i = 0; i < n; ++i) {
      auto* w = new work("self_destroying", [&ran](work& self) {
        ran.fetch_add(1);
        delete &self;
      });
      ASSERT_TRUE(wq.queue(*w));
    }
    log_capture capture;
    auto* thrower = new work("self_destroying_thrower", [](work& self) {
      delete &self;
      throw std::runtime_error("after its own delete");
    });
    ASSERT_TRUE(wq.queue(*thrower));
    wq.flush();  // waits for every instance, though none of their items exists any more
    EXPECT_EQ(ran.load(), n);
    const wq_stats s = wq.stats();
    EXPECT_EQ(s.executed, static_cast<std::uint64_t>(n) + 1);
    EXPECT_EQ(s.exceptions, 1u);
    EXPECT_EQ(capture.count("work self_destroying_thrower threw: after its own delete"), 1u)
        << testing::PrintToString(capture.lines());
  }
  trace::enable(false);
}

TEST(WorkqueueDeathTest, AnItemThatDestroysItselfAfterQueueingItselfAgainDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        workqueue wq("self_destroy_requeued");
        auto* w = new work("requeued_then_destroyed", [&wq](work& self) {
          wq.queue(self);
          delete &self;
        });
        wq.queue(*w);
        wq.flush();
      },
      "BUG: work requeued_then_destroyed destroyed by its own function while queued again");
}

TEST(Workqueue, PendingBitRefusesSecondQueueUntilItRuns) {
  // An ordered queue holds the second item inactive while the first blocks.
  workqueue wq("pending", wq_options{.ordered = true});
  gate release;
  std::atomic<int> runs{0};
  work blocker("blocker", [&](work&) { release.wait(); });
  work item("item", [&](work&) { ++runs; });
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(wq.queue(item));
  EXPECT_TRUE(item.pending());
  EXPECT_FALSE(wq.queue(item));  // already pending: nothing changes
  EXPECT_FALSE(wq.queue_on(first_cpu(), item));
  release.open();
  wq.flush();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_FALSE(item.pending());
  EXPECT_EQ(wq.stats().queued, 2u);
}

TEST(Workqueue, RequeueDuringExecutionRunsOnceMore) {
  workqueue wq("requeue");
  std::atomic<int> runs{0};
  std::atomic<bool> requeued{false};
  work item("self", [&](work& self) {
    if (++runs == 1) requeued = wq.queue(self);  // the pending bit is already clear
  });
  ASSERT_TRUE(wq.queue(item));
  wq.flush();
  wq.flush();  // the re-queued instance was queued during the first flush
  EXPECT_TRUE(requeued.load());
  EXPECT_EQ(runs.load(), 2);
}

TEST(Workqueue, RequeueFromAnotherThreadWhileRunningRunsOnceMore) {
  workqueue wq("requeue2");
  gate started, release;
  std::atomic<int> runs{0};
  work item("blocking", [&](work&) {
    if (++runs == 1) {
      started.open();
      may_block blocking;
      release.wait();
    }
  });
  ASSERT_TRUE(wq.queue(item));
  ASSERT_TRUE(started.wait());
  EXPECT_FALSE(item.pending());  // cleared before the function ran
  EXPECT_TRUE(wq.queue(item));   // so this queues a second run
  release.open();
  item.flush();
  EXPECT_EQ(runs.load(), 2);
}

TEST(Workqueue, ItemNeverRunsOnTwoWorkersAtOnce) {
  // The first run blocks (inside may_block, so its pool may start other workers). A second
  // instance queued on another CPU must wait for the first: it is sent to the first's
  // worker. Deterministic: we release the first run only once the second instance has
  // either started (a violation) or been taken off the worklist by the pool.
  if (system_topology().cpus().size() < 2) GTEST_SKIP() << "needs two CPUs";
  workqueue wq("nonreentrant");
  gate first_started, release;
  std::atomic<int> inside{0}, overlaps{0}, runs{0};
  work item("nonreentrant", [&](work&) {
    if (inside.fetch_add(1) != 0) ++overlaps;
    if (++runs == 1) {
      first_started.open();
      may_block blocking;
      release.wait();
    }
    inside.fetch_sub(1);
  });
  ASSERT_TRUE(wq.queue_on(first_cpu(), item));
  ASSERT_TRUE(first_started.wait());
  ASSERT_TRUE(wq.queue_on(last_cpu(), item));
  // Wait until no pool holds the item on its worklist any more (handed to the running
  // worker) or a second run started.
  EXPECT_TRUE(eventually([&] {
    if (runs.load() >= 2) return true;
    for (const pool_info& p : worker_pools()) {
      if (p.nr_pending > 0) return false;
    }
    return true;
  }));
  EXPECT_EQ(overlaps.load(), 0);
  release.open();
  item.flush();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(Workqueue, BoundItemsRunOnTheirCpu) {
  workqueue wq("bound");
  for (int cpu : system_topology().cpus()) {
    int ran_on = -1;
    work item("where", [&](work&) { ran_on = sched_getcpu(); });
    ASSERT_TRUE(wq.queue_on(cpu, item));
    item.flush();
    EXPECT_EQ(ran_on, cpu);
    // queue() from a thread running on `cpu` uses that CPU's pool.
    int ran_on2 = -1;
    work item2("local", [&](work&) { ran_on2 = sched_getcpu(); });
    named_thread t("q-local", cpu_set{cpu}, [&] { wq.queue(item2); });
    t.join();
    item2.flush();
    EXPECT_EQ(ran_on2, cpu);
  }
}

TEST(Workqueue, OrderedQueueRunsOneAtATimeInQueueingOrder) {
  workqueue wq("ordered", wq_options{.ordered = true});
  constexpr int n = 500;
  std::mutex lock;
  std::vector<int> order;
  std::atomic<int> inside{0}, overlaps{0};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<work>("ordered", [&, i](work&) {
      if (inside.fetch_add(1) != 0) ++overlaps;
      {
        std::lock_guard guard(lock);
        order.push_back(i);
      }
      inside.fetch_sub(1);
    }));
  }
  // Queue from both CPUs alternately: still one FIFO.
  for (int i = 0; i < n; ++i) {
    const auto& cpus = system_topology().cpus().cpus();
    ASSERT_TRUE(wq.queue_on(cpus[static_cast<std::size_t>(i) % cpus.size()],
                            *items[static_cast<std::size_t>(i)]));
  }
  wq.flush();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(wq.stats().peak_active, 1);
}

// Queues `n` items that block (inside may_block) until released, and checks that no more
// than `limit` ever run at once, and that `limit` do run at once.
void check_max_active(workqueue& wq, int n, int limit, int cpu) {
  std::atomic<int> inside{0}, peak{0};
  gate release;
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<work>("limited", [&](work&) {
      const int now = inside.fetch_add(1) + 1;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      may_block blocking;
      release.wait();
      inside.fetch_sub(1);
    }));
  }
  for (auto& w : items)
    ASSERT_TRUE(cpu >= 0 ? wq.queue_on(cpu, *w) : wq.queue(*w));
  EXPECT_TRUE(eventually([&] { return inside.load() == limit; }));
  release.open();
  wq.flush();
  EXPECT_EQ(peak.load(), limit);
  EXPECT_EQ(wq.stats().peak_active, limit);
}

TEST(Workqueue, MaxActiveIsPerCpuForBoundQueues) {
  workqueue wq("max2", wq_options{.max_active = 2});
  check_max_active(wq, 12, 2, first_cpu());
}

TEST(Workqueue, MaxActiveIsGlobalForUnboundQueues) {
  workqueue wq("umax3",
               wq_options{.unbound = true, .max_active = 3, .scope = affinity_scope::system});
  check_max_active(wq, 12, 3, -1);
}

// A slot freed by an ending item goes to a waiting item, as in the kernel: with max_active
// 32, 31 active items wait (in may_block) for an item that waits inactive behind them, and
// a 32nd ends - the waiting one must start, or nothing ever ends. (An ending item refills
// once a sixteenth of the slots are free; the watchdog activates what waits with fewer
// free: active_domain::refill_at.) For both kinds of queue (bound: the limit is per CPU,
// so all on one CPU).
void a_freed_slot_activates_a_waiting_item(workqueue& wq, int cpu) {
  constexpr int limit = 32;
  gate freed, release_last;
  std::atomic<int> waiting{0};
  std::atomic<bool> freed_ran{false};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < limit - 1; ++i) {
    items.push_back(std::make_unique<work>("waits_for_freer", [&](work&) {
      waiting.fetch_add(1);
      may_block blocking;
      freed.wait();
    }));
  }
  items.push_back(std::make_unique<work>("ends_last", [&](work&) {
    may_block blocking;
    release_last.wait();
  }));
  work freer("freer", [&](work&) {
    freed_ran = true;
    freed.open();
  });
  auto queue = [&](work& w) { return cpu >= 0 ? wq.queue_on(cpu, w) : wq.queue(w); };
  for (auto& w : items)
    ASSERT_TRUE(queue(*w));
  ASSERT_TRUE(eventually([&] { return waiting.load() == limit - 1; }));
  ASSERT_TRUE(queue(freer));  // no slot: it waits inactive
  EXPECT_EQ(wq.stats().peak_active, limit);
  release_last.open();  // one slot comes free
  const bool ran = eventually([&] { return freed_ran.load(); }, 10s);
  EXPECT_TRUE(ran) << "a slot came free and the item waiting for one never started";
  if (!ran) freed.open();  // let the others end, so that the queue can
  wq.flush();
}

TEST(Workqueue, AFreedSlotActivatesAWaitingItemUnbound) {
  workqueue wq("refill_u",
               wq_options{.unbound = true, .max_active = 32, .scope = affinity_scope::system});
  a_freed_slot_activates_a_waiting_item(wq, -1);
}

TEST(Workqueue, AFreedSlotActivatesAWaitingItemPerCpu) {
  workqueue wq("refill_b", wq_options{.max_active = 32});
  a_freed_slot_activates_a_waiting_item(wq, first_cpu());
}

TEST(Workqueue, UnboundScopeCpuRunsOnThatCpu) {
  workqueue wq("ucpu", wq_options{.unbound = true, .scope = affinity_scope::cpu});
  for (int cpu : system_topology().cpus()) {
    int ran_on = -1;
    work item("where", [&](work&) { ran_on = sched_getcpu(); });
    ASSERT_TRUE(wq.queue_on(cpu, item));
    item.flush();
    EXPECT_EQ(ran_on, cpu);
  }
  bool unbound_pool_seen = false;
  for (const pool_info& p : worker_pools()) {
    if (!p.bound) {
      unbound_pool_seen = true;
      EXPECT_EQ(p.flags, 0x4u);
    }
  }
  EXPECT_TRUE(unbound_pool_seen);
}

TEST(Workqueue, HighpriWorkersRunAtRaisedPriority) {
  workqueue wq("hi", wq_options{.highpri = true});
  int nice = 0;
  std::string name;
  work item("nice", [&](work&) {
    nice = this_thread_nice();
    name = this_thread_name();
  });
  log_capture capture;  // a refusal (unprivileged run) is reported once, not failed
  ASSERT_TRUE(wq.queue_on(first_cpu(), item));
  item.flush();
  EXPECT_EQ(name.back(), 'H');  // kworker/N:MH
  if (capture.count("cannot set nice") == 0) {
    EXPECT_EQ(nice, -20);
  } else {
    EXPECT_EQ(nice, 0);
  }
}

TEST(Workqueue, FlushWaitsForEarlierItemsNotLaterOnes) {
  workqueue wq("flush");
  gate release_a, release_b, a_started;
  std::atomic<bool> b_finished{false};
  work a("a", [&](work&) {
    a_started.open();
    may_block blocking;
    release_a.wait();
  });
  work b("b", [&](work&) {
    may_block blocking;
    release_b.wait();
    b_finished = true;
  });
  ASSERT_TRUE(wq.queue_on(first_cpu(), a));
  ASSERT_TRUE(a_started.wait());
  std::atomic<bool> flushed{false};
  std::thread flusher([&] {
    wq.flush();
    flushed = true;
  });
  // Once the flush has begun waiting it has flipped the flush color: b is "later" work.
  ASSERT_TRUE(eventually([&] { return wq.stats().flushes == 1; }));
  ASSERT_TRUE(wq.queue_on(first_cpu(), b));
  EXPECT_FALSE(flushed.load());
  release_a.open();
  EXPECT_TRUE(eventually([&] { return flushed.load(); }));  // while b still blocks
  EXPECT_FALSE(b_finished.load());
  release_b.open();
  flusher.join();
  wq.flush();
}

// A flush waits on its own queue's channel (completion.hpp): a thread flushing one queue,
// held up by a blocked item, is not notified at the ends of another queue's items - nor do
// those ends make a system call on its account. Counted on the flusher's channel, whose
// sequence moves only for keys that share it (about one item in 64 of the other queue).
// Before, one channel for everything moved at every item's end while anyone flushed anything
// (kills one_completion_channel).
TEST(Workqueue, AFlushIsNotWokenByTheEndsOfAnotherQueuesItems) {
  workqueue held("flush-held");
  const detail::completion_channel& channel =
      detail::completion_channel_for(&detail::wq_access::impl(held));
  std::vector<std::unique_ptr<workqueue>> queues;  // until one has a channel of its own
  do {
    queues.push_back(std::make_unique<workqueue>("flush-other"));
  } while (&detail::completion_channel_for(&detail::wq_access::impl(*queues.back())) == &channel &&
           queues.size() < 64);
  workqueue& other = *queues.back();
  gate started, release;
  work blocker("blocker", [&](work&) {
    started.open();
    may_block blocking;
    (void)release.wait();
  });
  ASSERT_TRUE(held.queue(blocker));
  ASSERT_TRUE(started.wait());
  std::thread flusher([&] { held.flush(); });
  ASSERT_TRUE(eventually([&] { return channel.waiters.load() > 0; }));
  constexpr int items = 4000;
  std::atomic<int> ran{0};
  std::vector<std::unique_ptr<work>> ends;  // each its own address, each queued once
  for (int i = 0; i < items; ++i)
    ends.push_back(std::make_unique<work>("end", [&ran](work&) { ran.fetch_add(1); }));
  const std::uint32_t before = channel.seq.load();
  for (auto& w : ends)
    ASSERT_TRUE(other.queue(*w));
  other.flush();
  const std::uint32_t moved = channel.seq.load() - before;
  release.open();
  flusher.join();
  EXPECT_EQ(ran.load(), items);
  EXPECT_LT(moved, static_cast<std::uint32_t>(items / 8))
      << "another queue's item ends notified a flusher of this one";
}

TEST(Workqueue, CancelSyncWaitsForTheRunningInstance) {
  workqueue wq("cancelsync");
  gate started, release;
  std::atomic<bool> finished{false};
  work item("slow", [&](work&) {
    started.open();
    may_block blocking;
    release.wait();
    finished = true;
  });
  ASSERT_TRUE(wq.queue(item));
  ASSERT_TRUE(started.wait());
  ASSERT_TRUE(wq.queue(item));  // a pending second instance
  std::atomic<bool> returned{false}, was_pending{false}, finished_at_return{false};
  std::thread canceller([&] {
    was_pending = item.cancel_sync();
    finished_at_return = finished.load();
    returned = true;
  });
  // Once the pending instance is counted cancelled, the canceller waits for the running one.
  ASSERT_TRUE(eventually([&] { return wq.stats().cancelled == 1; }));
  EXPECT_FALSE(returned.load());
  EXPECT_FALSE(wq.queue(item));  // the canceller holds the pending bit meanwhile
  release.open();
  canceller.join();
  EXPECT_TRUE(was_pending.load());
  EXPECT_TRUE(finished_at_return.load());
  EXPECT_FALSE(item.pending());
  EXPECT_EQ(wq.stats().cancelled, 1u);
  EXPECT_EQ(wq.stats().executed, 1u);
  EXPECT_TRUE(wq.queue(item));  // usable again
  item.flush();
}

TEST(Workqueue, CancelRemovesAPendingItemThatThenNeverRuns) {
  workqueue wq("cancel", wq_options{.ordered = true});
  gate release;
  std::atomic<int> runs{0};
  work blocker("blocker", [&](work&) { release.wait(); });
  work item("victim", [&](work&) { ++runs; });
  work idle("idle", [&](work&) {});
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(wq.queue(item));
  EXPECT_TRUE(item.cancel());
  EXPECT_FALSE(item.pending());
  EXPECT_FALSE(item.cancel());
  EXPECT_FALSE(idle.cancel());
  EXPECT_FALSE(idle.flush());
  release.open();
  wq.flush();
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(wq.stats().cancelled, 1u);
}

TEST(Workqueue, DrainRunsChainedQueueingToTheEnd) {
  workqueue wq("drain");
  std::atomic<int> runs{0};
  work chain("chain", [&](work& self) {
    if (++runs < 100) {
      EXPECT_TRUE(wq.queue(self));  // chained: allowed while draining
    }
  });
  ASSERT_TRUE(wq.queue(chain));
  wq.drain();
  EXPECT_EQ(runs.load(), 100);
  EXPECT_FALSE(chain.pending());
}

TEST(Workqueue, DrainRefusesQueueingFromOutside) {
  workqueue wq("drain2");
  gate started, release;
  work blocker("blocker", [&](work&) {
    started.open();
    may_block blocking;
    release.wait();
  });
  work outsider("outsider", [&](work&) {});
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(started.wait());
  std::thread drainer([&] { wq.drain(); });
  ASSERT_TRUE(eventually([&] { return wq.stats().draining; }));
  log_capture capture;
  EXPECT_FALSE(wq.queue(outsider));
  EXPECT_FALSE(outsider.pending());
  EXPECT_EQ(capture.count("while draining is refused"), 1u);
  release.open();
  drainer.join();
  EXPECT_EQ(wq.stats().rejected, 1u);
  EXPECT_TRUE(wq.queue(outsider));  // drain is over
  wq.flush();
}

// drain() from one of the queue's own items would wait for itself: it throws, and the
// queue is not left draining (it goes on taking work from outside).
TEST(Workqueue, DrainFromItsOwnItemThrowsAndLeavesTheQueueOpen) {
  workqueue wq("drain_self");
  std::atomic<int> threw{0};
  work self("self", [&](work&) {
    try {
      wq.drain();
    } catch (const std::logic_error&) {
      threw.fetch_add(1);
    }
  });
  std::atomic<int> outsider_runs{0};
  work outsider("outsider", [&](work&) { outsider_runs.fetch_add(1); });
  ASSERT_TRUE(wq.queue(self));
  self.flush();
  EXPECT_EQ(threw.load(), 1);
  EXPECT_FALSE(wq.stats().draining);
  EXPECT_TRUE(wq.queue(outsider)) << "the queue was left draining";
  wq.flush();
  EXPECT_EQ(outsider_runs.load(), 1);
}

TEST(Workqueue, DestructionRunsEverythingQueuedFirst) {
  std::atomic<int> runs{0};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < 200; ++i)
    items.push_back(std::make_unique<work>("d", [&](work&) { ++runs; }));
  {
    workqueue wq("destroy", wq_options{.max_active = 3});
    for (auto& w : items)
      ASSERT_TRUE(wq.queue(*w));
  }
  EXPECT_EQ(runs.load(), 200);
}

TEST(Workqueue, ExceptionIsCaughtCountedAndReported) {
  workqueue wq("throwing");
  log_capture capture;
  std::atomic<int> after{0};
  work bad("bad_item", [](work&) { throw std::runtime_error("boom"); });
  work good("good_item", [&](work&) { ++after; });
  ASSERT_TRUE(wq.queue_on(first_cpu(), bad));
  ASSERT_TRUE(wq.queue_on(first_cpu(), good));
  wq.flush();
  EXPECT_EQ(after.load(), 1);
  EXPECT_EQ(capture.count("workqueue throwing: work bad_item threw: boom"), 1u);
  const wq_stats s = wq.stats();
  EXPECT_EQ(s.exceptions, 1u);
  EXPECT_EQ(s.executed, 2u);
  ASSERT_TRUE(wq.queue(bad));  // the item is reusable
  wq.flush();
  EXPECT_EQ(wq.stats().exceptions, 2u);
}

TEST(Workqueue, MayBlockLetsTheNextItemOfTheCpuRun) {
  // Without may_block and without the watchdog's sleep detection, b could never start
  // while a waits for it on the same CPU pool.
  auto cfg = get_watchdog_config();
  cfg.wq_sleep_detection = false;
  scoped_watchdog_config no_sleep_detection(cfg);
  workqueue wq("mayblock");
  gate b_ran;
  work b("b", [&](work&) { b_ran.open(); });
  work a("a", [&](work&) {
    EXPECT_TRUE(wq.queue_on(first_cpu(), b));
    may_block blocking;
    EXPECT_TRUE(b_ran.wait());
  });
  ASSERT_TRUE(wq.queue_on(first_cpu(), a));
  wq.flush();
  b.flush();  // a queued b while the flush may already have been waiting
  EXPECT_TRUE(b_ran.is_open());
}

TEST(Workqueue, IdleWorkersAreCulledDownToTwo) {
  set_worker_idle_timeout(5ms);
  workqueue wq("cull");
  gate release;
  std::atomic<int> inside{0};
  std::vector<std::unique_ptr<work>> items;
  for (int i = 0; i < 6; ++i) {
    items.push_back(std::make_unique<work>("spawn", [&](work&) {
      ++inside;
      may_block blocking;  // each blocked item makes the pool start another worker
      release.wait();
    }));
  }
  for (auto& w : items)
    ASSERT_TRUE(wq.queue_on(first_cpu(), *w));
  ASSERT_TRUE(eventually([&] { return inside.load() == 6; }));
  auto workers_of_cpu = [&] {
    for (const pool_info& p : worker_pools()) {
      if (p.bound && p.cpus == std::to_string(first_cpu()) && p.nice == 0) return p.nr_workers;
    }
    return -1;
  };
  EXPECT_GE(workers_of_cpu(), 6);
  release.open();
  wq.flush();
  // Kernel rule: cull while nr_idle > 2 && (nr_idle - 2) * 4 >= nr_busy -> two remain.
  EXPECT_TRUE(eventually([&] { return workers_of_cpu() == 2; })) << workers_of_cpu();
  set_worker_idle_timeout(300s);
}

TEST(Workqueue, SystemQueuesRunWork) {
  for (workqueue* wq :
       {&system_wq(), &system_highpri_wq(), &system_unbound_wq(), &system_long_wq()}) {
    std::atomic<int> runs{0};
    work item("sys", [&](work&) { ++runs; });
    ASSERT_TRUE(wq->queue(item));
    item.flush();
    EXPECT_EQ(runs.load(), 1) << wq->name();
  }
  EXPECT_EQ(system_wq().name(), "events");
  EXPECT_TRUE(system_unbound_wq().options().unbound);
}

TEST(Workqueue, ItemsAreNamedAfterTheirFunction) {
  work plain(key_garbage_collector);
  EXPECT_EQ(plain.name(), "key_garbage_collector");
  work lambda([](work&) {});
  EXPECT_NE(lambda.name().find("lambda"), std::string::npos) << lambda.name();
  work named("probe", [](work&) {});
  EXPECT_EQ(named.name(), "probe");
}

TEST(Workqueue, InvalidArgumentsAreRejectedNamingThem) {
  auto message_of = [](auto fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message_of([] {
              workqueue("x", wq_options{.unbound = true, .cpu_intensive = true});
            }).find("cpu_intensive"),
            std::string::npos);
  EXPECT_NE(message_of([] { workqueue("x", wq_options{.max_active = 5000}); }).find("max_active"),
            std::string::npos);
  EXPECT_NE(message_of([] { workqueue("", {}); }).find("name"), std::string::npos);
  workqueue wq("args");
  work w("w", [](work&) {});
  EXPECT_NE(message_of([&] { wq.queue_on(4000, w); }).find("cpu"), std::string::npos);
  EXPECT_FALSE(w.pending());
  delayed_work d("d", [](work&) {});
  EXPECT_NE(message_of([&] { wq.queue_delayed(d, -1ms); }).find("delay"), std::string::npos);
  // An empty function is refused when the item is made (a literal nullptr does not compile).
  void (*no_function)(work&) = nullptr;
  EXPECT_THROW(work("empty", no_function), std::invalid_argument);
  EXPECT_THROW(work{no_function}, std::invalid_argument);
  EXPECT_THROW(work(std::function<void(work&)>()), std::invalid_argument);
  EXPECT_THROW(delayed_work(std::function<void(delayed_work&)>()), std::invalid_argument);
  EXPECT_THROW(wq.post(std::function<void()>()), std::invalid_argument);
  EXPECT_THROW(set_worker_idle_timeout(0s), std::invalid_argument);
}

TEST(Workqueue, FlushFromOwnItemIsALogicError) {
  workqueue wq("selfflush");
  std::atomic<int> errors{0};
  work item("self", [&](work& self) {
    try {
      self.flush();
    } catch (const std::logic_error&) {
      ++errors;
    }
    try {
      wq.flush();
    } catch (const std::logic_error&) {
      ++errors;
    }
  });
  ASSERT_TRUE(wq.queue(item));
  wq.flush();
  EXPECT_EQ(errors.load(), 2);
}

TEST(Workqueue, TraceEventsUseTheKernelTracepointNames) {
  trace::enable();
  workqueue wq("traced", wq_options{.ordered = true});
  work a("traced_a", [](work&) {});
  work b("traced_b", [](work&) {});
  ASSERT_TRUE(wq.queue(a));
  ASSERT_TRUE(wq.queue(b));  // inactive behind a: activated when a finishes
  wq.flush();
  trace::enable(false);
  std::set<std::string> seen;
  const nlohmann::json trace_json = nlohmann::json::parse(trace::chrome_json());
  for (const auto& e : trace_json["traceEvents"]) {
    if (e.contains("args") && e["args"].contains("function") &&
        e["args"]["function"] == "traced_b") {
      seen.insert(e["name"].get<std::string>());
    }
  }
  for (const char* name : {"workqueue_queue_work", "workqueue_activate_work",
                           "workqueue_execute_start", "workqueue_execute_end"}) {
    EXPECT_TRUE(seen.count(name)) << name;
  }
}

TEST(Workqueue, StatsExposeWorkerSchedstat) {
  workqueue wq("sched");
  volatile std::uint64_t sink = 0;
  work item("busy", [&](work&) {
    for (int i = 0; i < 1'000'000; ++i)
      sink = sink + static_cast<std::uint64_t>(i);
  });
  ASSERT_TRUE(wq.queue(item));
  wq.flush();
  if (!schedstat_reader().available()) GTEST_SKIP() << "no schedstat";
  EXPECT_GT(wq.stats().workers.switches, 0u);
}

// work_state's layout (LP64): a queueing reads and writes one cache line of the item - the
// queuer's fields fill its third line - and the worker that runs the instance writes that
// line and the second, where its own fields sit after the name; the function (first line) is
// only read. The layout bought unbound dispatch 1.15-1.18x (issue 29, docs/workqueue.md).
TEST(WorkLayout, AQueueingWritesOneLineOfTheItemAndItsWorkerOneMore) {
  if (sizeof(void*) != 8) GTEST_SKIP() << "the layout is argued for LP64";
  work w("layout", [](work&) {});
  detail::work_state& s = detail::wq_access::state(w);
  const auto* const base = reinterpret_cast<const char*>(&w);
  // The line of the object's first and last byte of a field.
  auto lines = [base](const auto& field) {
    const auto* const at = reinterpret_cast<const char*>(&field);
    constexpr auto line = static_cast<std::ptrdiff_t>(detail::cache_line);
    return std::pair<std::ptrdiff_t, std::ptrdiff_t>((at - base) / line,
                                                     (at + sizeof(field) - 1 - base) / line);
  };
  const std::pair<std::ptrdiff_t, std::ptrdiff_t> queuers{2, 2}, workers{1, 1};
  EXPECT_EQ(lines(s.flags), queuers);
  EXPECT_EQ(lines(s.color), queuers);
  EXPECT_EQ(lines(s.active), queuers);
  EXPECT_EQ(lines(s.last_id), queuers);
  EXPECT_EQ(lines(s.pending_id), queuers);
  EXPECT_EQ(lines(s.pwq_of), queuers);
  EXPECT_EQ(lines(s.queued_ns), queuers);
  EXPECT_EQ(lines(s.queued_pool), queuers);
  EXPECT_EQ(lines(s.incoming_next), queuers);
  EXPECT_EQ(lines(s.activated_late), queuers);
  EXPECT_EQ(lines(s.last_pool), queuers);  // read by every queueing
  EXPECT_EQ(lines(s.running_id), workers);
  EXPECT_EQ(lines(s.activated_ns), workers);  // written only for an item that waited
  EXPECT_EQ(lines(s.current_worker), workers);
  EXPECT_EQ(lines(s.on_list), workers);
  EXPECT_EQ(lines(s.node), workers);
  EXPECT_LE(sizeof(work), 256u) << "a posted node is four lines (src/wq/post.cpp)";
}

// A callable that needs more than a pointer's alignment is held on the heap (the item's
// storage is pointer-aligned): it runs with its alignment kept, and is destroyed with the item.
TEST(WorkLayout, AnOverAlignedCallableRunsFromTheHeap) {
  struct alignas(16) wide {
    long double value;
  };
  workqueue wq("overaligned", wq_options{.unbound = true});
  std::atomic<bool> aligned{false};
  {
    wide captured{2.5L};
    work w([captured, &aligned](work&) {
      aligned = reinterpret_cast<std::uintptr_t>(&captured) % alignof(wide) == 0 &&
                captured.value == 2.5L;
    });
    ASSERT_TRUE(wq.queue(w));
    w.flush();
  }
  EXPECT_TRUE(aligned.load());
}

}  // namespace
}  // namespace quiesce
