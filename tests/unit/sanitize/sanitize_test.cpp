// SPDX-License-Identifier: Apache-2.0
#include "quiesce/sanitize.hpp"
#include "quiesce/experiments/sanitize_boot.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "quiesce/log.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"
#include "wait.hpp"

namespace quiesce::sanitize {
namespace {

using namespace std::chrono_literals;
using test::eventually;

TEST(Sanitizer, PageAccountingHoldsAfterEveryPass) {
  page_sanitizer s({.pages = 5000,
                    .passes = 1,
                    .fail_share = 0.1,
                    .poison_share = 0.02,
                    .policy = qs_policy::none,
                    .seed = 7});
  const sanitize_result r = s.run();
  ASSERT_EQ(r.passes.size(), 2u);  // failures were retried once
  for (const pass_counts& p : r.passes)
    EXPECT_EQ(p.sanitized + p.left_dirty + p.poisoned, 5000u);
  EXPECT_GT(r.passes[0].left_dirty, 0u);
  EXPECT_EQ(r.passes[1].left_dirty, 0u);  // they succeed the second time
  EXPECT_GT(r.passes[1].poisoned, 0u);
  EXPECT_EQ(r.pages_processed, 5000u + r.passes[0].left_dirty);
  EXPECT_FALSE(r.stopped);
}

TEST(Sanitizer, StopEndsTheLoopWithinOnePageAndKeepsListsConsistent) {
  page_sanitizer s({.pages = 30000,
                    .passes = 8,
                    .fail_share = 0.05,
                    .poison_share = 0.01,
                    .policy = qs_policy::none,
                    .seed = 3});
  sanitize_result r;
  std::thread t([&] { r = s.run(); });
  ASSERT_TRUE(eventually([&] { return s.pages_done() > 1000; }));
  s.request_stop();
  const std::size_t at_request = s.pages_done();
  t.join();
  EXPECT_TRUE(r.stopped);
  EXPECT_LE(r.pages_processed, at_request + 1);  // within one page of the request
  const pass_counts l = s.lists();
  EXPECT_EQ(l.sanitized + l.left_dirty + l.poisoned, 30000u);
  EXPECT_GT(l.left_dirty, 0u);  // the pages it did not reach are still dirty
}

TEST(Sanitizer, BadOptionsAreRejectedNamingThem) {
  auto msg = [](sanitizer_options o) {
    try {
      page_sanitizer s(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({.pages = 0}).find("pages"), std::string::npos);
  EXPECT_NE(msg({.passes = 0}).find("passes"), std::string::npos);
  EXPECT_NE(msg({.fail_share = 1.5}).find("fail_share"), std::string::npos);
  EXPECT_NE(msg({.poison_share = -0.1}).find("poison_share"), std::string::npos);
  EXPECT_THROW(parse_qs_policy("sometimes"), std::invalid_argument);
  EXPECT_EQ(parse_qs_policy("tasks-qs"), qs_policy::tasks_qs);
}

// The seed's scenario, with millisecond stall thresholds: a Tasks waiter ("systemd") and a
// sanitizer thread ("ksgxd") that sanitizes batches of pages until the test stops it.
struct scenario {
  explicit scenario(qs_policy p) : policy(p) {}
  void start() {
    ksgxd = named_thread("ksgxd", [this] {
      rcu_thread_online(rcu_tasks_domain());
      online = true;
      while (!stop.load()) {
        page_sanitizer batch({.pages = 2000,
                              .passes = 1,
                              .fail_share = 0,
                              .poison_share = 0,
                              .policy = policy,
                              .seed = 1});
        batch.run();
      }
      loop_ended = true;
      rcu_thread_offline(rcu_tasks_domain());
    });
    while (!online.load())
      std::this_thread::yield();
    waiter = named_thread("systemd", [this] {
      rcu_synchronize(rcu_tasks_domain());
      loop_running_at_return = !loop_ended.load();
      returned = true;
    });
  }
  void finish() {
    stop = true;
    waiter.join();
    ksgxd.join();
  }
  const qs_policy policy;
  std::atomic<bool> online{false}, stop{false}, loop_ended{false}, returned{false},
      loop_running_at_return{false};
  named_thread ksgxd, waiter;
};

TEST(SanitizerTasks, WithTasksQsTheWaiterFinishesWhileTheLoopRuns) {
  scenario s(qs_policy::tasks_qs);
  s.start();
  EXPECT_TRUE(eventually([&] { return s.returned.load(); }));
  s.finish();
  EXPECT_TRUE(s.loop_running_at_return.load());
}

void expect_waiter_held(qs_policy policy) {
  watchdog_config cfg = get_watchdog_config();
  cfg.tick = 1ms;
  cfg.rcu_tasks_stall = 30ms;
  scoped_watchdog_config fast_stalls(cfg);
  log_capture capture;
  scenario s(policy);
  s.start();
  // Until the stall detector names the sanitizer, the waiter must not have returned.
  ASSERT_TRUE(eventually([&] { return s.returned.load() || capture.count("\tksgxd:") > 0; }));
  EXPECT_FALSE(s.returned.load()) << to_string(policy);
  EXPECT_EQ(capture.count("INFO: rcu_tasks detected stalls on threads:"), 1u);
  s.finish();
  EXPECT_FALSE(s.loop_running_at_return.load()) << "returned only after the loop ended";
}

TEST(SanitizerTasks, WithoutQuiescentStatesTheWaiterWaitsForTheWholeLoop) {
  expect_waiter_held(qs_policy::none);
}

TEST(SanitizerTasks, CondReschedAloneDoesNotHelp) {
  expect_waiter_held(qs_policy::resched);
}

TEST(Boot, ReportsTheWaiterBootAndSanitizer) {
  using experiments::boot_options;
  using experiments::boot_result;
  boot_options o;
  o.sanitizer.pages = 4000;
  o.sanitizer.policy = qs_policy::tasks_qs;
  o.steps_before = 1;
  o.steps_after = 1;
  o.step_work = 1ms;
  const boot_result r = experiments::run_boot(o);
  EXPECT_GE(r.pages, 4000u);  // the first pass, plus the retries of left-dirty pages
  EXPECT_GT(r.pages_per_s, 0);
  EXPECT_GE(r.boot_ms, r.waiter_ms);
  EXPECT_GT(r.sanitize_ms, 0);
}

}  // namespace
}  // namespace quiesce::sanitize
