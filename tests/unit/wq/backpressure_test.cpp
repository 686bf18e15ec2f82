// SPDX-License-Identifier: Apache-2.0
// Backpressure (src/wq/queue.cpp, queuer_yields_to_backlog): a thread whose queueings find
// every active slot of their queue taken gives its CPU up once per backlog_yield_every of
// them, counted in wq_stats::backlog_yields; a queueing that finds a slot free never counts,
// nor does the timer thread queueing a due delayed item. Mutants: backlog_never_yields,
// timer_yields_to_backlog.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "internal.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using detail::backlog_yield_every;
using test::eventually;
using test::gate;

// An ordered queue (one active slot) whose slot a running item holds until `release` opens.
struct saturated_queue {
  saturated_queue() {
    EXPECT_TRUE(wq.queue(blocker));
    EXPECT_TRUE(eventually([&] { return started.load(); })) << "the blocker never started";
  }
  ~saturated_queue() {
    release.open();
    wq.flush();
  }
  workqueue wq{"saturated", wq_options{.ordered = true}};
  std::atomic<bool> started{false};
  gate release;
  work blocker{"blocker", [this](work&) {
                 started.store(true);
                 release.wait();
               }};
};

std::vector<std::unique_ptr<work>> items(int n, std::atomic<int>& ran) {
  std::vector<std::unique_ptr<work>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_unique<work>("behind", [&ran](work&) { ran.fetch_add(1); }));
  return out;
}

// Each thread counts its own saturated queueings: every thread below starts at zero.
TEST(Backpressure, AQueuerYieldsOncePerSixteenQueueingsThatFindEverySlotTaken) {
  std::atomic<int> ran{0};
  auto behind = items(3 * static_cast<int>(backlog_yield_every), ran);
  auto more = items(static_cast<int>(backlog_yield_every), ran);
  {
    saturated_queue s;  // flushed before the items go
    // The blocker took the one slot, free, at its queueing: nothing counted.
    EXPECT_EQ(s.wq.stats().backlog_yields, 0u);
    std::thread([&] {
      for (auto& w : behind)
        EXPECT_TRUE(s.wq.queue(*w));
    }).join();
    EXPECT_EQ(s.wq.stats().backlog_yields, 3u);
    // Another thread: one short of a yield, then the queueing that makes it.
    std::thread([&] {
      for (std::size_t i = 0; i + 1 < more.size(); ++i)
        EXPECT_TRUE(s.wq.queue(*more[i]));
      EXPECT_EQ(s.wq.stats().backlog_yields, 3u);
      EXPECT_TRUE(s.wq.queue(*more.back()));
      EXPECT_EQ(s.wq.stats().backlog_yields, 4u);
    }).join();
  }
  EXPECT_EQ(ran.load(), 4 * static_cast<int>(backlog_yield_every)) << "every item ran";
}

// Items whose every queueing finds a free slot never count, however many.
TEST(Backpressure, QueueingsThatFindAFreeSlotNeverYield) {
  workqueue wq("roomy", wq_options{.unbound = true});
  std::atomic<int> ran{0};
  auto all = items(4 * static_cast<int>(backlog_yield_every), ran);
  std::thread([&] {
    for (auto& w : all) {
      ASSERT_TRUE(wq.queue(*w));
      wq.flush();  // it ran: the next finds its slot free
    }
  }).join();
  EXPECT_EQ(ran.load(), static_cast<int>(all.size()));
  EXPECT_EQ(wq.stats().backlog_yields, 0u);
}

// The timer thread serves every queue's timers: a due item it queues into a saturated queue
// never makes it yield (nor counts).
TEST(Backpressure, DueDelayedItemsNeverMakeTheTimerYield) {
  std::atomic<int> ran{0};
  const int n = 3 * static_cast<int>(backlog_yield_every);
  std::vector<std::unique_ptr<delayed_work>> delayed;
  for (int i = 0; i < n; ++i)
    delayed.push_back(std::make_unique<delayed_work>("due", [&ran](work&) { ran.fetch_add(1); }));
  {
    saturated_queue s;
    for (auto& w : delayed)
      ASSERT_TRUE(s.wq.queue_delayed(*w, 1ms));
    // Each fired item is counted queued as it lands (behind the blocker, waiting).
    ASSERT_TRUE(eventually([&] { return s.wq.stats().queued == 1u + n; }))
        << "queued " << s.wq.stats().queued;
    EXPECT_EQ(s.wq.stats().backlog_yields, 0u);
  }
  EXPECT_EQ(ran.load(), n);
}

}  // namespace
}  // namespace quiesce
