// SPDX-License-Identifier: Apache-2.0
// Memory under a retire flood (rcu.hpp, set_rcu_callback_limit): a thread that retires
// outside its read-side sections never has more than the limit of its domain's callbacks
// pending - it waits for the backlog to drain - and one that may not wait (inside a
// section, online in QSBR) never blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "quiesce/clock.hpp"
#include "quiesce/rcu.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;

std::atomic<std::uint64_t> g_deleted{0};

struct counted {
  int payload = 0;
};

// A deleter slow enough (2 us) that a retiring thread outruns the callback thread.
struct slow_delete {
  void operator()(counted* p) const {
    const std::uint64_t until = now_ns() + 2'000;
    while (now_ns() < until) {
    }
    delete p;
    g_deleted.fetch_add(1, std::memory_order_relaxed);
  }
};

class limit_scope {
 public:
  explicit limit_scope(std::size_t limit) : before_(rcu_callback_limit()) {
    set_rcu_callback_limit(limit);
  }
  ~limit_scope() { set_rcu_callback_limit(before_); }
  limit_scope(const limit_scope&) = delete;
  limit_scope& operator=(const limit_scope&) = delete;

 private:
  const std::size_t before_;
};

TEST(RcuFlood, ARetiringThreadNeverHasMoreThanTheLimitPending) {
  constexpr std::uint64_t limit = 1000;
  constexpr std::uint64_t n = 20'000;
  limit_scope scope(limit);
  rcu_barrier();  // nothing of earlier tests pending
  const std::uint64_t deleted_before = g_deleted.load();
  std::uint64_t peak = 0;
  for (std::uint64_t i = 1; i <= n; ++i) {
    rcu_retire(new counted, slow_delete{});
    const std::uint64_t deleted = g_deleted.load(std::memory_order_relaxed) - deleted_before;
    peak = std::max(peak, i - deleted);  // retired, not yet deleted
  }
  rcu_barrier();
  EXPECT_EQ(g_deleted.load() - deleted_before, n);
  EXPECT_LE(peak, limit) << "objects retired and not yet reclaimed exceeded the limit";
  EXPECT_GE(peak, limit / 2) << "the flood never reached the limit: nothing was tested";
}

// Waiting inside a read-side section would wait for the grace period the section holds up.
TEST(RcuFlood, ARetireInsideASectionOrOnlineInQsbrNeverWaits) {
  limit_scope scope(10);
  const std::uint64_t deleted_before = g_deleted.load();
  test::finishes_or_abort(
      [] {
        std::scoped_lock reader(rcu_default_domain());
        for (int i = 0; i < 1000; ++i)
          rcu_retire(new counted, slow_delete{});
      },
      60s, "1000 retires past the limit inside a read-side section");
  test::finishes_or_abort(
      [] {
        rcu_thread_online(rcu_qsbr_domain());
        for (int i = 0; i < 1000; ++i) {
          rcu_retire(new counted, slow_delete{}, rcu_qsbr_domain());
        }
        rcu_thread_offline(rcu_qsbr_domain());
      },
      60s, "1000 QSBR retires past the limit while online");
  rcu_barrier();
  rcu_barrier(rcu_qsbr_domain());
  EXPECT_EQ(g_deleted.load() - deleted_before, 2000u);
}

TEST(RcuFlood, TheLimitIsAtLeastOne) {
  EXPECT_THROW(set_rcu_callback_limit(0), std::invalid_argument);
  EXPECT_GE(rcu_callback_limit(), 1u);
}

}  // namespace
}  // namespace quiesce
