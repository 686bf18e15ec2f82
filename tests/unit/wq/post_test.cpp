// SPDX-License-Identifier: Apache-2.0
// workqueue::post, post_on, post_delayed and submit (fire-and-forget callables, their
// results), work items holding move-only functions, and delayed_work functions that receive
// the item as a delayed_work.
#include <gtest/gtest.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpus.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::gate;

// Counts its live copies: a posted callable must be destroyed exactly once per post.
struct tracked {
  explicit tracked(std::atomic<int>& live) : live(&live) { ++live; }
  tracked(tracked&& o) noexcept : live(o.live) { ++*live; }
  tracked(const tracked&) = delete;
  ~tracked() { --*live; }
  std::atomic<int>* live;
};

class Post : public testing::TestWithParam<bool> {
 protected:
  wq_options options() const { return wq_options{.unbound = GetParam()}; }
};

// Every post runs exactly once, with its own captures (a node handed out while still in
// use would run one callable twice and lose another), and each callable is destroyed
// after it ran: two posters, move-only captures.
TEST_P(Post, EachCallableRunsOnceWithItsOwnCapturesAndIsDestroyed) {
  workqueue wq("post", options());
  constexpr int per_poster = 20000;
  constexpr int posters = 2;
  std::vector<std::atomic<int>> hits(per_poster * posters);
  std::atomic<int> live{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < posters; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < per_poster; ++i) {
        const int id = p * per_poster + i;
        auto payload = std::make_unique<int>(id);
        ASSERT_TRUE(wq.post([&hits, &wrong, id, payload = std::move(payload), t = tracked(live)] {
          if (*payload != id) ++wrong;
          hits[static_cast<std::size_t>(id)].fetch_add(1);
        }));
      }
    });
  }
  for (auto& t : threads)
    t.join();
  wq.flush();
  EXPECT_EQ(wrong.load(), 0);
  int not_once = 0;
  for (auto& h : hits)
    not_once += h.load() != 1;
  EXPECT_EQ(not_once, 0) << "posted callables that did not run exactly once";
  EXPECT_EQ(live.load(), 0) << "posted callables not destroyed after running";
  const wq_stats s = wq.stats();
  EXPECT_EQ(s.queued, static_cast<std::uint64_t>(per_poster * posters));
  EXPECT_EQ(s.executed, static_cast<std::uint64_t>(per_poster * posters));
}

// A callable that throws is counted and reported as any item's exception, and destroyed.
TEST_P(Post, AThrowingCallableIsReportedAndDestroyed) {
  workqueue wq("post_throw", options());
  log_capture capture;
  std::atomic<int> live{0};
  std::atomic<int> after{0};
  ASSERT_TRUE(wq.post([t = tracked(live)] { throw std::runtime_error("posted boom"); }));
  ASSERT_TRUE(wq.post([&after] { ++after; }));
  wq.flush();
  EXPECT_EQ(after.load(), 1);
  EXPECT_EQ(live.load(), 0);
  EXPECT_EQ(wq.stats().exceptions, 1u);
  EXPECT_EQ(capture.count("threw: posted boom"), 1u) << testing::PrintToString(capture.lines());
}

// A refused post returns false and destroys the callable without running it.
TEST_P(Post, RefusedWhileDrainingDestroysTheCallableUnrun) {
  workqueue wq("post_drain", options());
  gate started, release;
  work blocker("blocker", [&](work&) {
    started.open();
    may_block blocking;
    release.wait();
  });
  ASSERT_TRUE(wq.queue(blocker));
  ASSERT_TRUE(started.wait());
  std::thread drainer([&] { wq.drain(); });
  ASSERT_TRUE(eventually([&] { return wq.stats().draining; }));
  std::atomic<int> live{0};
  std::atomic<bool> ran{false};
  {
    log_capture capture;
    EXPECT_FALSE(wq.post([&ran, t = tracked(live)] { ran = true; }));
    EXPECT_EQ(live.load(), 0) << "a refused callable must be destroyed at once";
    auto refused = wq.submit([] { return 1; });
    EXPECT_THROW(refused.get(), std::future_error);
  }
  release.open();
  drainer.join();
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(wq.stats().rejected, 2u);
  // Once the drain is over, posts are accepted again.
  EXPECT_TRUE(wq.post([&ran] { ran = true; }));
  wq.flush();
  EXPECT_TRUE(ran.load());
}

// submit() carries the value or the exception; from several threads at once.
TEST_P(Post, SubmitCarriesTheValueOrTheException) {
  workqueue wq("submit", options());
  std::vector<std::future<int>> results;
  for (int i = 0; i < 1000; ++i) {
    results.push_back(wq.submit([p = std::make_unique<int>(i)] { return *p * 2; }));
  }
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(results[static_cast<std::size_t>(i)].get(), i * 2);
  auto failing = wq.submit([]() -> int { throw std::out_of_range("no value"); });
  EXPECT_THROW(failing.get(), std::out_of_range);
  auto nothing = wq.submit([] {});
  nothing.get();
  EXPECT_EQ(wq.stats().exceptions, 0u) << "the future took the exception, not the queue";
}

INSTANTIATE_TEST_SUITE_P(BoundAndUnbound, Post, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "unbound" : "bound");
                         });

TEST(PostOn, RunsOnThatCpusPoolAndRefusesAnUnusableCpu) {
  workqueue wq("post_on");
  const int cpu = test::last_cpu();
  std::atomic<int> ran_on{-1};
  ASSERT_TRUE(wq.post_on(cpu, [&ran_on] { ran_on = ::sched_getcpu(); }));
  wq.flush();
  EXPECT_EQ(ran_on.load(), cpu);
  std::atomic<int> live{0};
  EXPECT_THROW(wq.post_on(4000, [t = tracked(live)] {}), std::invalid_argument);
  EXPECT_EQ(live.load(), 0) << "the callable of a post that threw must be destroyed";
}

TEST(PostDelayed, NeverRunsEarlyAndRefusesANegativeDelay) {
  workqueue wq("post_delayed");
  constexpr int n = 20;
  std::vector<std::uint64_t> queued_at(n), ran_at(n);
  for (int i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    queued_at[k] = now_ns();
    ASSERT_TRUE(wq.post_delayed([&ran_at, k] { ran_at[k] = now_ns(); },
                                std::chrono::milliseconds(1 + (i * 7) % 30)));
  }
  wq.drain();  // waits for the timers too
  for (int i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_GE(ran_at[k] - queued_at[k], static_cast<std::uint64_t>(1 + (i * 7) % 30) * 1'000'000u)
        << "item " << i;
  }
  std::atomic<int> live{0};
  EXPECT_THROW(wq.post_delayed([t = tracked(live)] {}, -1ms), std::invalid_argument);
  EXPECT_EQ(live.load(), 0);
}

// Threads that post and exit hand their cached nodes back; posting keeps working after.
TEST(PostNodes, ThreadsThatPostAndExit) {
  workqueue wq("post_threads", wq_options{.unbound = true});
  std::atomic<int> runs{0};
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 2000; ++i)
          ASSERT_TRUE(wq.post([&runs] { ++runs; }));
      });
    }
    for (auto& t : threads)
      t.join();
  }
  wq.flush();
  EXPECT_EQ(runs.load(), 3 * 4 * 2000);
}

// Items that post more items from their own function (chained) are waited for by drain.
TEST(PostNodes, ChainedPostsAreDrained) {
  std::atomic<int> runs{0};
  {
    workqueue wq("post_chain");
    struct step {
      workqueue* wq;
      std::atomic<int>* runs;
      int left;
      void operator()() {
        ++*runs;
        if (left > 0) {
          ASSERT_TRUE(wq->post(step{wq, runs, left - 1}));
        }
      }
    };
    ASSERT_TRUE(wq.post(step{&wq, &runs, 999}));
  }  // the destructor drains
  EXPECT_EQ(runs.load(), 1000);
}

// Posted items are named after the callable's type.
TEST(PostNodes, ItemsAreNamedAfterTheCallable) {
  workqueue wq("post_name");
  std::string name;
  gate done;
  ASSERT_TRUE(wq.post([&] {
    name = current_work()->name();
    done.open();
  }));
  ASSERT_TRUE(done.wait());
  wq.flush();
  EXPECT_NE(name.find("lambda"), std::string::npos) << name;
}

// ---- the memory behind posted items ---------------------------------------------------

// A plugged queue (ordered: one item at a time, held) that `n` posts wait behind: that many nodes
// in flight at once. Returns the slab bytes taken while they were, once they have all run.
std::size_t burst(std::size_t n) {
  workqueue wq("post-burst", wq_options{.ordered = true});
  gate started, release;
  std::atomic<std::size_t> ran{0};
  EXPECT_TRUE(wq.post([&] {
    started.open();
    EXPECT_TRUE(release.wait());
  }));
  EXPECT_TRUE(started.wait());
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_TRUE(wq.post([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }));
  const std::size_t in_flight = get_posted_memory().slab_bytes;
  release.open();
  wq.flush();
  EXPECT_EQ(ran.load(), n);
  return in_flight;
}

// What may stay of a burst's slabs after a trim: those of the nodes threads cache (64 each,
// in at most 64 slabs each; the poster and a few workers) - far below 40,000 nodes'.
std::size_t cached_slabs_bytes() {
  return 8 * 64 * 32 * get_posted_memory().node_bytes;
}

// Guards against a burst's memory staying taken for good: after 40,000 nodes were in flight
// at once, a trim gives back all but the slabs of nodes still cached by threads, and posts
// go on after it. (The automatic trim may run meanwhile too: a second after the lists
// filled.)
TEST(PostMemory, ATrimGivesABurstsSlabsBack) {
  const std::size_t node = get_posted_memory().node_bytes;
  ASSERT_GT(node, 0u);
  const std::size_t base = get_posted_memory().slab_bytes;
  constexpr std::size_t n = 40000;
  EXPECT_GE(burst(n), n * node) << "the nodes in flight were not in slabs";
  trim_posted_memory();
  const posted_memory after = get_posted_memory();
  EXPECT_LE(after.slab_bytes, base + cached_slabs_bytes());
  EXPECT_EQ(trim_posted_memory(), 0u) << "a second trim found more whole slabs";
  EXPECT_EQ(burst(1000) >= 1000 * node, true);  // posts after a trim
}

// Guards against a burst's memory waiting for a call that never comes: the lists' unused
// nodes go back by themselves (within a few seconds; the limit here is generous), all but
// the 2,048 the trimmer keeps.
TEST(PostMemory, ABurstsMemoryGoesBackByItself) {
  const std::size_t node = get_posted_memory().node_bytes;
  const std::size_t base = get_posted_memory().slab_bytes;
  EXPECT_GE(burst(40000), 40000 * node);
  const std::size_t bound = base + 2048 * node + cached_slabs_bytes();
  EXPECT_TRUE(eventually([bound] { return get_posted_memory().slab_bytes <= bound; }, 120s))
      << get_posted_memory().slab_bytes << " bytes still taken, more than " << bound;
  // Done (the trimmer stops looking at 8,192 free nodes or fewer), and 2,048 kept.
  EXPECT_GE(get_posted_memory().free_nodes, 2048u) << "the trimmer kept fewer nodes than it says";
}

// Plugs an ordered queue: posts an item that holds it until `release` opens, and waits for
// that item to start. False if the post was refused or the item never started.
bool plug(workqueue& q, gate& started, gate& release) {
  return q.post([&started, &release] {
    started.open();
    (void)release.wait();
  }) && started.wait();
}

// Guards against a trim freeing a slab that still holds a node in flight: posts alternate
// between a plugged queue (its nodes stay in flight) and a free-running one (its nodes go
// back to the lists), so most slabs hold both, and a burst on a third queue leaves slabs that
// are wholly free, which the trim must free; then the freed memory is taken and scribbled
// on, and every plugged item must still run once with its own captures. In a child process:
// a freed node's function pointer is garbage.
void trim_keeps_nodes_in_flight() {
  constexpr int n = 20000;
  constexpr std::uint64_t magic = 0x5157'4945'5343'4521;
  workqueue plugged("post-plugged", wq_options{.ordered = true});
  workqueue running("post-running");
  gate started, release;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> wrong{0};
  if (!plug(plugged, started, release)) std::_Exit(2);
  std::atomic<int> ran{0};
  for (int i = 0; i < n; ++i) {
    plugged.post([&hits, &wrong, i, check = magic ^ static_cast<std::uint64_t>(i)] {
      if ((check ^ magic) != static_cast<std::uint64_t>(i)) {
        wrong.fetch_add(1);
        return;
      }
      hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    running.post([&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
  }
  running.flush();
  // And slabs that are wholly free: a burst held on a third queue (the lists hold fewer
  // nodes than it takes, so most come from new slabs), then run.
  {
    workqueue held("post-held", wq_options{.ordered = true});
    gate held_started, held_release;
    if (!plug(held, held_started, held_release)) std::_Exit(2);
    for (int i = 0; i < 2 * n; ++i)
      held.post([] {});
    held_release.open();
  }
  if (trim_posted_memory() == 0) std::_Exit(4);  // the held burst's slabs are wholly free
  // Take the freed memory (malloc hands it out again) and scribble on it.
  std::vector<std::unique_ptr<unsigned char[]>> scribbles;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n) / 8; ++i) {
    scribbles.emplace_back(new unsigned char[32 * get_posted_memory().node_bytes]);
    std::memset(scribbles.back().get(), 0x5a, 32 * get_posted_memory().node_bytes);
  }
  release.open();
  plugged.flush();
  int once = 0;
  for (auto& h : hits)
    once += h.load() == 1;
  std::_Exit(once == n && wrong.load() == 0 ? 0 : 3);
}

TEST(PostMemoryDeathTest, ATrimKeepsEveryNodeInFlight) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(trim_keeps_nodes_in_flight(), testing::ExitedWithCode(0), "");
}

// A work item may hold a move-only function, as large as it likes.
TEST(WorkFunction, MoveOnlyAndLargeCallables) {
  workqueue wq("move_only");
  std::atomic<int> sum{0};
  work small("small", [p = std::make_unique<int>(5), &sum](work&) { sum += *p; });
  std::array<int, 64> big{};
  big[63] = 7;
  work large("large", [big, p = std::make_unique<int>(1), &sum](work&) { sum += big[63] + *p; });
  ASSERT_TRUE(wq.queue(small));
  ASSERT_TRUE(wq.queue(large));
  wq.flush();
  EXPECT_EQ(sum.load(), 13);
}

// A delayed item's function gets the item as a delayed_work: periodic work re-arms itself
// without a cast, and one cancel_sync() stops it.
TEST(DelayedWorkFunction, ReceivesTheDelayedItem) {
  workqueue wq("periodic");
  std::atomic<int> runs{0};
  delayed_work tick("tick", [&](delayed_work& self) {
    if (++runs < 5) wq.mod_delayed(self, 1ms);
  });
  ASSERT_TRUE(wq.queue_delayed(tick, 1ms));
  ASSERT_TRUE(eventually([&] { return runs.load() == 5; }));
  tick.cancel_sync();
  EXPECT_EQ(runs.load(), 5);
  // A function taking work& is still accepted.
  delayed_work plain("plain", [&](work&) { ++runs; });
  ASSERT_TRUE(wq.queue_delayed(plain, 0ms));
  wq.flush();
  EXPECT_EQ(runs.load(), 6);
}

}  // namespace
}  // namespace quiesce
