// Stress: threads queue, cancel, flush and re-queue random items at random. Every queue()
// that returned true must be matched by exactly one execution or one successful cancel;
// no item ever runs on two workers at once; nothing runs after its workqueue is destroyed.
//
// QUIESCE_STRESS_SCALE (default 1) multiplies the rounds, for long runs on demand.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "quiesce/topology.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;

int scale() {
  const char* s = std::getenv("QUIESCE_STRESS_SCALE");
  return s ? std::max(1, std::atoi(s)) : 1;
}

struct tracked {
  std::atomic<std::int64_t> queued{0};  // successful queue operations (new instances)
  std::atomic<std::int64_t> executed{0};
  std::atomic<std::int64_t> cancelled{0};  // cancel/cancel_sync that returned true
  std::atomic<int> inside{0};
  std::unique_ptr<delayed_work> item;
};

void run_round(const wq_options& options, int round, std::atomic<int>& overlaps,
               std::atomic<int>& after_destroy) {
  constexpr int n_items = 12, n_threads = 3;
  const int ops = 3000;
  std::vector<tracked> items(n_items);
  std::atomic<bool> destroyed{false};
  for (auto& t : items) {
    t.item = std::make_unique<delayed_work>("stress",
                                            [&t, &overlaps, &destroyed, &after_destroy](work&) {
                                              if (destroyed.load()) ++after_destroy;
                                              if (t.inside.fetch_add(1) != 0) ++overlaps;
                                              // Stay inside a moment so that a second concurrent
                                              // run would be caught.
                                              for (int i = 0; i < 3; ++i)
                                                std::this_thread::yield();
                                              t.executed.fetch_add(1);
                                              t.inside.fetch_sub(1);
                                            });
  }
  {
    workqueue wq("stress", options);
    const auto& cpus = system_topology().cpus().cpus();
    std::vector<std::thread> threads;
    for (int th = 0; th < n_threads; ++th) {
      threads.emplace_back([&, th] {
        std::mt19937 rng(static_cast<unsigned>(round * 31 + th));
        for (int op = 0; op < ops; ++op) {
          tracked& t = items[rng() % n_items];
          switch (rng() % 10) {
            case 0:
            case 1:
            case 2:
              if (wq.queue(*t.item)) t.queued.fetch_add(1);
              break;
            case 3:
              if (wq.queue_on(cpus[rng() % cpus.size()], *t.item)) t.queued.fetch_add(1);
              break;
            case 4:
              if (wq.queue_delayed(*t.item, std::chrono::microseconds(rng() % 500))) {
                t.queued.fetch_add(1);
              }
              break;
            case 5:
              // True: the pending instance was moved (no new one); false: a new instance.
              if (!wq.mod_delayed(*t.item, std::chrono::microseconds(rng() % 300))) {
                t.queued.fetch_add(1);
              }
              break;
            case 6:
              if (t.item->cancel()) t.cancelled.fetch_add(1);
              break;
            case 7:
              if (t.item->cancel_sync()) t.cancelled.fetch_add(1);
              break;
            case 8:
              t.item->flush();
              break;
            case 9:
              if (rng() % 20 == 0) wq.flush();
              break;
          }
        }
      });
    }
    for (auto& th : threads)
      th.join();
  }  // destruction drains: every instance runs or was cancelled
  destroyed = true;
  for (int i = 0; i < n_items; ++i) {
    tracked& t = items[static_cast<std::size_t>(i)];
    EXPECT_FALSE(t.item->pending());
    EXPECT_EQ(t.queued.load(), t.executed.load() + t.cancelled.load())
        << "item " << i << ": queued " << t.queued << " executed " << t.executed << " cancelled "
        << t.cancelled;
  }
}

void stress(const wq_options& options) {
  std::atomic<int> overlaps{0}, after_destroy{0};
  for (int round = 0; round < 3 * scale(); ++round) {
    run_round(options, round, overlaps, after_destroy);
    if (testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(overlaps.load(), 0) << "an item ran on two workers at once";
  EXPECT_EQ(after_destroy.load(), 0) << "an item ran after its workqueue was destroyed";
}

TEST(WorkqueueStress, Bound) {
  stress({});
}
TEST(WorkqueueStress, BoundMaxActive1) {
  stress({.max_active = 1});
}
TEST(WorkqueueStress, Unbound) {
  stress({.unbound = true, .max_active = 2});
}
TEST(WorkqueueStress, Ordered) {
  stress({.ordered = true});
}

}  // namespace
}  // namespace quiesce
