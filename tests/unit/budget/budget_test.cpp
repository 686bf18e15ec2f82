// SPDX-License-Identifier: Apache-2.0
#include "quiesce/budget.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "quiesce/clock.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;

TEST(Budget, ItemBudgetStopsAfterNItems) {
  budget b = budget::items(64);
  int processed = 0;
  while (b.spend())
    ++processed;
  EXPECT_EQ(processed, 64);
  EXPECT_TRUE(b.exhausted());
  EXPECT_EQ(b.spent(), 64u);
  EXPECT_FALSE(b.spend());
  b.restart();
  EXPECT_FALSE(b.exhausted());
  EXPECT_TRUE(b.spend());
  EXPECT_THROW(budget::items(0), std::invalid_argument);
}

TEST(Budget, TimeBudgetStopsOnceTheSliceHasPassed) {
  const std::uint64_t start = now_ns();  // before the budget: its slice starts after this
  budget b = budget::time(1ms);
  std::size_t items = 0;
  while (b.spend())
    ++items;
  // It cannot stop before the slice has passed (a lower bound, never a timing race).
  EXPECT_GE(now_ns() - start, 1'000'000u);
  EXPECT_GE(items, 17u);
  EXPECT_EQ(items % 16, 0u);  // the clock is read every 16 items
  EXPECT_THROW(budget::time(0ns), std::invalid_argument);
}

TEST(Budget, TimeBudgetAlwaysAllowsTheFirstItem) {
  budget b = budget::time(1ns);
  EXPECT_TRUE(b.spend());
}

TEST(Budget, UnlimitedNeverRunsOut) {
  budget b = budget::unlimited();
  for (int i = 0; i < 100000; ++i)
    ASSERT_TRUE(b.spend());
  EXPECT_FALSE(b.exhausted());
}

TEST(AdaptiveBudget, ConvergesToTheTargetFromMeasuredCost) {
  adaptive_budget a(100us, 1, 1 << 20, 64);
  EXPECT_EQ(a.chunk(), 64u);
  for (int i = 0; i < 30; ++i)
    a.record(a.chunk(), std::chrono::nanoseconds(a.chunk() * 250));
  EXPECT_EQ(a.chunk(), 400u);  // 100 us / 250 ns per item
  EXPECT_DOUBLE_EQ(a.ns_per_item(), 250.0);
  // Costs rise: chunks shrink, but never below min_items.
  for (int i = 0; i < 60; ++i)
    a.record(10, 10ms);
  EXPECT_EQ(a.chunk(), 1u);
  EXPECT_EQ(a.next().spent(), 0u);
  EXPECT_THROW(adaptive_budget(0ns), std::invalid_argument);
  EXPECT_THROW(adaptive_budget(1ms, 0), std::invalid_argument);
  EXPECT_THROW(adaptive_budget(1ms, 10, 5), std::invalid_argument);
}

TEST(ResumableWork, KeepsItsCursorAcrossExecutionsAndLetsOthersRun) {
  workqueue wq("resumable", wq_options{.ordered = true});
  std::vector<int> order;  // touched only by the ordered queue's one worker
  std::size_t cursor = 0;
  constexpr std::size_t total = 1000;
  resumable_work walker(
      "walker", wq, [] { return budget::items(64); },
      [&](budget& b) {
        while (cursor < total && b.spend())
          ++cursor;
        order.push_back(static_cast<int>(cursor));
        return cursor < total ? progress::more : progress::done;
      });
  work other("other", [&](work&) { order.push_back(-1); });
  test::gate open;
  work blocker("blocker", [&](work&) { open.wait(); });
  ASSERT_TRUE(wq.queue(blocker));  // holds the ordered queue while we line up
  ASSERT_TRUE(walker.start());
  ASSERT_TRUE(wq.queue(other));  // behind the first chunk: runs before the second
  open.open();
  wq.drain();
  EXPECT_EQ(cursor, total);
  EXPECT_EQ(walker.executions(), 16u);  // ceil(1000 / 64)
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(order[0], 64);
  EXPECT_EQ(order[1], -1);
  EXPECT_EQ(order.back(), 1000);
}

}  // namespace
}  // namespace quiesce
