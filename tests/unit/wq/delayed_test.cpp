// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::gate;

TEST(DelayedWork, NeverRunsEarly) {
  workqueue wq("delayed");
  constexpr int n = 20;
  std::vector<std::uint64_t> queued_at(n), ran_at(n);
  std::vector<std::unique_ptr<delayed_work>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<delayed_work>(
        "d", [&ran_at, i](work&) { ran_at[static_cast<std::size_t>(i)] = now_ns(); }));
  }
  for (int i = 0; i < n; ++i) {
    queued_at[static_cast<std::size_t>(i)] = now_ns();
    ASSERT_TRUE(wq.queue_delayed(*items[static_cast<std::size_t>(i)],
                                 std::chrono::milliseconds(1 + (i * 7) % 30)));
  }
  wq.drain();  // waits for the timers too
  for (int i = 0; i < n; ++i) {
    const auto delay_ns = static_cast<std::uint64_t>(1 + (i * 7) % 30) * 1'000'000u;
    EXPECT_GE(ran_at[static_cast<std::size_t>(i)] - queued_at[static_cast<std::size_t>(i)],
              delay_ns)
        << "item " << i;
  }
}

TEST(DelayedWork, PendingWhileArmedAndCancellable) {
  workqueue wq("delayed-cancel");
  std::atomic<int> runs{0};
  delayed_work item("later", [&](work&) { ++runs; });
  ASSERT_TRUE(wq.queue_delayed(item, 1h));
  EXPECT_TRUE(item.pending());
  EXPECT_FALSE(wq.queue_delayed(item, 1ms));  // already pending
  EXPECT_FALSE(wq.queue(item));
  EXPECT_TRUE(item.cancel());
  EXPECT_FALSE(item.pending());
  wq.drain();  // nothing armed any more: returns at once
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(wq.stats().cancelled, 1u);
}

TEST(DelayedWork, ZeroDelayQueuesNow) {
  workqueue wq("delayed-zero");
  gate ran;
  delayed_work item("now", [&](work&) { ran.open(); });
  ASSERT_TRUE(wq.queue_delayed(item, 0ns));
  EXPECT_TRUE(ran.wait());
  item.flush();
}

TEST(DelayedWork, ModDelayedMovesTheTimerWhateverTheState) {
  workqueue wq("mod");
  gate ran;
  std::atomic<int> runs{0};
  delayed_work item("mod", [&](work&) {
    ++runs;
    ran.open();
  });
  ASSERT_TRUE(wq.queue_delayed(item, 1h));
  EXPECT_TRUE(wq.mod_delayed(item, 1ms));  // was pending: true, re-armed sooner
  EXPECT_TRUE(ran.wait());
  item.flush();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_FALSE(wq.mod_delayed(item, 1h));  // was idle: false, now armed
  EXPECT_TRUE(item.pending());
  EXPECT_TRUE(wq.mod_delayed(item, 1h));
  EXPECT_TRUE(item.cancel_sync());
  EXPECT_EQ(runs.load(), 1);
}

TEST(DelayedWork, FlushQueuesAnArmedItemAtOnce) {
  workqueue wq("flush-delayed");
  std::atomic<int> runs{0};
  delayed_work item("soon", [&](work&) { ++runs; });
  ASSERT_TRUE(wq.queue_delayed(item, 1h));
  EXPECT_TRUE(item.flush());  // kernel flush_delayed_work: run it now, wait for it
  EXPECT_EQ(runs.load(), 1);
  EXPECT_FALSE(item.pending());
}

TEST(DelayedWork, CancelSyncOfAnArmedItem) {
  workqueue wq("cs-delayed");
  delayed_work item("x", [](work&) { ADD_FAILURE() << "must not run"; });
  ASSERT_TRUE(wq.queue_delayed(item, 1h));
  EXPECT_TRUE(item.cancel_sync());
  EXPECT_FALSE(item.cancel_sync());
}

TEST(DelayedWork, DestructionWaitsForArmedTimers) {
  std::atomic<int> runs{0};
  delayed_work item("armed", [&](work&) { ++runs; });
  {
    workqueue wq("destroy-delayed");
    ASSERT_TRUE(wq.queue_delayed(item, 20ms));
  }
  EXPECT_EQ(runs.load(), 1);  // nothing lost
}

}  // namespace
}  // namespace quiesce
