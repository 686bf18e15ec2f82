// SPDX-License-Identifier: Apache-2.0
// An unbound pool runs short items on one worker (pool::short_items, src/wq/internal.hpp):
// when it enters and leaves that mode, and that an item which runs long after short ones
// does not hold up the items behind it for longer than the watchdog takes to see it (mutant
// short_items_kept: the watchdog never ends the mode, and the item behind never starts).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "internal.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce::detail {
namespace {

using namespace std::chrono_literals;
using test::eventually;

// An unbound pool of two CPUs, alone (no worker is ever created for it here).
pool two_cpu_pool() {
  return pool(/*id=*/999, cpu_set{0, 1}, /*cpu=*/-1, /*node=*/0, /*nice=*/0);
}

TEST(ShortItems, APoolEntersTheModeAfterARunOfShortItemsAndLeavesItAfterTwoLongOnes) {
  pool p = two_cpu_pool();
  lock_guard guard(p.lock);
  EXPECT_EQ(p.max_running(), 2);  // a new pool wakes a worker per item
  for (int i = 1; i < pool::short_streak_to_enter; ++i)
    p.note_run_locked(short_item_ns - 1);
  EXPECT_EQ(p.max_running(), 2) << "entered after " << pool::short_streak_to_enter - 1;
  p.note_run_locked(short_item_ns - 1);
  EXPECT_EQ(p.max_running(), 1) << "not entered after " << pool::short_streak_to_enter;
  // A short item preempted mid-run looks long: one alone does not end the mode.
  p.note_run_locked(short_item_ns);
  p.note_run_locked(short_item_ns - 1);
  p.note_run_locked(short_item_ns);
  EXPECT_EQ(p.max_running(), 1);
  p.note_run_locked(short_item_ns);
  EXPECT_EQ(p.max_running(), 2) << "two long items in a row did not end the mode";
  // The watchdog's end of the mode, and a per-CPU pool, which never enters it.
  for (int i = 0; i < pool::short_streak_to_enter; ++i)
    p.note_run_locked(0);
  ASSERT_EQ(p.max_running(), 1);
  EXPECT_TRUE(p.end_short_items_locked());
  EXPECT_EQ(p.max_running(), 2);
  EXPECT_FALSE(p.end_short_items_locked()) << "ended a mode the pool was not in";
  pool bound(998, cpu_set{0}, /*cpu=*/0, 0, 0);
  lock_guard bound_guard(bound.lock);
  for (int i = 0; i < pool::short_streak_to_enter; ++i)
    bound.note_run_locked(0);
  EXPECT_EQ(bound.max_running(), 1);
  EXPECT_FALSE(bound.short_items.load());
}

// After a run of short items the pool runs one worker; then an item spins (CPU-bound,
// counting as running) until an item queued behind it has run. Only the watchdog, which
// finds it has used long_item_ns of CPU time while work waits, lets a second worker start.
TEST(ShortItems, AnItemThatRunsLongAfterShortOnesDoesNotHoldUpTheItemsBehindIt) {
  if (system_topology().cpus().size() < 2) GTEST_SKIP() << "needs two CPUs";
  workqueue wq("short_then_long", wq_options{.unbound = true, .scope = affinity_scope::system});
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i)
    wq.post([&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
  wq.flush();
  ASSERT_EQ(ran.load(), 1000);
  std::atomic<bool> spinning{false}, behind_ran{false}, give_up{false};
  work spinner("spins_for_the_item_behind", [&](work&) {
    spinning = true;
    while (!behind_ran.load() && !give_up.load()) {
    }
  });
  work behind("behind", [&](work&) { behind_ran = true; });
  ASSERT_TRUE(wq.queue(spinner));
  ASSERT_TRUE(eventually([&] { return spinning.load(); }));
  ASSERT_TRUE(wq.queue(behind));
  const bool started = eventually([&] { return behind_ran.load(); }, 10s);
  give_up = true;
  spinner.flush();
  behind.flush();
  EXPECT_TRUE(started) << "an item queued behind one that ran long after short ones never "
                          "started while it ran";
}

}  // namespace
}  // namespace quiesce::detail
