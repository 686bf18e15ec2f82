// SPDX-License-Identifier: Apache-2.0
// Stress: threads - and the items themselves, from their own functions - queue, re-arm,
// cancel, flush and re-queue random items at random. Checked:
//  - every new instance (queue* true, mod_delayed false) ends exactly once: it runs, or a
//    cancel that returned true removed it;
//  - what each wait waited for: when work::flush() or cancel_sync() returns, every instance
//    of that item created before the call has ended; when workqueue::flush() returns, every
//    instance of the "plain" items (queued without delay, never moved) created before it
//    has ended;
//  - no item ever runs on two workers at once; nothing runs after its queue is destroyed.
// Items wait (flush, cancel_sync) only for items with a higher index, so waits cannot form a
// cycle (the kernel's flush_work deadlocks on cycles too), and only on queues where a
// blocked item cannot hold the last active slot.
//
// QUIESCE_STRESS_SCALE (default 1) multiplies the rounds, for long runs on demand.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "quiesce/topology.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;

int scale() {
  const char* s = std::getenv("QUIESCE_STRESS_SCALE");
  return s ? std::max(1, std::atoi(s)) : 1;
}

struct tracked {
  std::atomic<std::int64_t> created{0};  // new instances (queue* true, mod_delayed false)
  std::atomic<std::int64_t> executed{0};
  std::atomic<std::int64_t> cancelled{0};  // cancel/cancel_sync that returned true
  std::atomic<int> cancels_in_progress{0};
  std::atomic<int> inside{0};
  bool plain = false;  // queued only without delay and never moved
  std::mt19937 rng;    // used only by the item's own function (never concurrent with itself)
  std::unique_ptr<delayed_work> item;
  std::int64_t ended() const { return executed.load() + cancelled.load(); }
};

struct round_state {
  workqueue* wq = nullptr;
  std::vector<tracked> items;
  bool items_wait = false;  // whether item functions may flush / cancel_sync other items
  std::atomic<bool> destroyed{false};
  std::atomic<int> overlaps{0};
  std::atomic<int> after_destroy{0};
  std::atomic<int> early_returns{0};
  std::mutex lock;
  std::string first_early;  // L(lock)

  explicit round_state(std::size_t n) : items(n) {}

  void record_early(const std::string& what) {
    if (early_returns.fetch_add(1) == 0) {
      std::lock_guard guard(lock);
      first_early = what;
    }
  }

  // Instances of `t` created before a wait (`before`) have all ended once it returns. A
  // canceller counts its success just after cancel returns; wait for those to land.
  void expect_ended(tracked& t, std::int64_t before, const char* what) {
    if (t.ended() >= before) return;
    test::eventually([&] { return t.ended() >= before || t.cancels_in_progress.load() == 0; });
    if (t.ended() < before) {
      record_early(std::string(what) + " returned with " + std::to_string(before - t.ended()) +
                   " earlier instance(s) still alive");
    }
  }
};

// One random operation on item `target` by the calling thread (`self` = the index of the
// item whose function calls, or -1 for a test thread).
void operate(round_state& st, int self, std::size_t target, unsigned dice) {
  const auto& cpus = system_topology().cpus().cpus();
  tracked& t = st.items[target];
  workqueue& wq = *st.wq;
  const bool may_wait = self < 0 || (st.items_wait && static_cast<int>(target) > self);
  switch (dice % 10) {
    case 0:
    case 1:
      if (wq.queue(*t.item)) t.created.fetch_add(1);
      break;
    case 2:
      if (wq.queue_on(cpus[dice / 10 % cpus.size()], *t.item)) t.created.fetch_add(1);
      break;
    case 3:
      if (t.plain) break;
      if (wq.queue_delayed(*t.item, std::chrono::microseconds(dice / 10 % 400))) {
        t.created.fetch_add(1);
      }
      break;
    case 4:
      if (t.plain) break;
      // False: a new instance; true: the pending one moved, or the call was refused.
      if (!wq.mod_delayed(*t.item, std::chrono::microseconds(dice / 10 % 300))) {
        t.created.fetch_add(1);
      }
      break;
    case 5:
    case 6: {
      t.cancels_in_progress.fetch_add(1);
      if (t.item->cancel()) t.cancelled.fetch_add(1);
      t.cancels_in_progress.fetch_sub(1);
      break;
    }
    case 7: {
      if (!may_wait || static_cast<int>(target) == self) break;
      const std::int64_t before = t.created.load();
      t.cancels_in_progress.fetch_add(1);
      if (t.item->cancel_sync()) t.cancelled.fetch_add(1);
      t.cancels_in_progress.fetch_sub(1);
      st.expect_ended(t, before, "cancel_sync()");
      break;
    }
    case 8: {
      if (!may_wait || static_cast<int>(target) == self) break;
      const std::int64_t before = t.created.load();
      t.item->flush();
      st.expect_ended(t, before, "work::flush()");
      break;
    }
    case 9: {
      if (self >= 0 || dice / 10 % 10 != 0) break;  // workqueue::flush from test threads only
      std::vector<std::int64_t> before;
      for (auto& p : st.items)
        before.push_back(p.plain ? p.created.load() : 0);
      wq.flush();
      for (std::size_t i = 0; i < st.items.size(); ++i) {
        if (st.items[i].plain) st.expect_ended(st.items[i], before[i], "workqueue::flush()");
      }
      break;
    }
  }
}

void item_function(round_state& st, std::size_t index) {
  tracked& t = st.items[index];
  if (st.destroyed.load()) st.after_destroy.fetch_add(1);
  if (t.inside.fetch_add(1) != 0) st.overlaps.fetch_add(1);
  // Stay inside a moment so that a second concurrent run would be caught.
  for (int i = 0; i < 3; ++i)
    std::this_thread::yield();
  // Half the executions act too: on itself (re-queue, re-arm, cancel) or on another item.
  const unsigned dice = static_cast<unsigned>(t.rng());
  if (dice % 2 == 0) {
    const std::size_t target = dice / 2 % 3 == 0 ? index : (dice / 6) % st.items.size();
    operate(st, static_cast<int>(index), target, dice / 64);
  }
  t.executed.fetch_add(1);
  t.inside.fetch_sub(1);
}

void run_round(const wq_options& options, bool items_wait, int round, round_state& st) {
  constexpr int n_threads = 3;
  const int ops = 3000;
  st.items_wait = items_wait;
  for (std::size_t i = 0; i < st.items.size(); ++i) {
    tracked& t = st.items[i];
    t.plain = i % 4 == 0;
    t.rng.seed(static_cast<unsigned>(round * 977 + i));
    t.item = std::make_unique<delayed_work>("stress" + std::to_string(i),
                                            [&st, i](work&) { item_function(st, i); });
  }
  {
    workqueue wq("stress", options);
    st.wq = &wq;
    std::vector<std::thread> threads;
    for (int th = 0; th < n_threads; ++th) {
      threads.emplace_back([&, th] {
        std::mt19937 rng(static_cast<unsigned>(round * 31 + th));
        for (int op = 0; op < ops; ++op)
          operate(st, -1, rng() % st.items.size(), static_cast<unsigned>(rng()));
      });
    }
    for (auto& th : threads)
      th.join();
  }  // destruction drains: every instance runs or was cancelled
  st.destroyed = true;
  for (std::size_t i = 0; i < st.items.size(); ++i) {
    tracked& t = st.items[i];
    EXPECT_FALSE(t.item->pending()) << "item " << i;
    EXPECT_EQ(t.created.load(), t.ended())
        << "item " << i << ": created " << t.created << " executed " << t.executed << " cancelled "
        << t.cancelled;
  }
}

void stress(const wq_options& options, bool items_wait) {
  for (int round = 0; round < 3 * scale(); ++round) {
    round_state st(12);
    run_round(options, items_wait, round, st);
    EXPECT_EQ(st.overlaps.load(), 0) << "an item ran on two workers at once";
    EXPECT_EQ(st.after_destroy.load(), 0) << "an item ran after its workqueue was destroyed";
    EXPECT_EQ(st.early_returns.load(), 0) << "a wait returned early: " << st.first_early;
    if (testing::Test::HasFailure()) break;
  }
}

TEST(WorkqueueStress, Bound) {
  stress({}, /*items_wait=*/true);
}
TEST(WorkqueueStress, BoundMaxActive1) {
  stress({.max_active = 1}, /*items_wait=*/false);
}
TEST(WorkqueueStress, Unbound) {
  stress({.unbound = true, .max_active = 2}, /*items_wait=*/false);
}
TEST(WorkqueueStress, UnboundWaiting) {
  stress({.unbound = true}, /*items_wait=*/true);
}
TEST(WorkqueueStress, Ordered) {
  stress({.ordered = true}, /*items_wait=*/false);
}

}  // namespace
}  // namespace quiesce
