// SPDX-License-Identifier: Apache-2.0
// RCU's memory ordering at the updater: a cookie (rcu_get_cookie) taken after a removal
// must name a grace period that starts after the removal is visible - the kernel's
// get_state_synchronize_rcu() starts with smp_mb() for this. Without the fence, x86 lets
// the cookie's load of the started grace-period number pass the removal's store while that
// store waits in the store buffer; a grace period that starts in that window then counts,
// though a reader that begins after it ends can still read the removed value.
//
// The test checks the guarantee after the fact, so it never depends on timing to pass:
// the updater publishes round r (the removal of round r-1) and records its cookie c[r];
// the reader records, for each of its reads, the cookie k it took before a grace period of
// its own (rcu_synchronize: when it returns, grace period k has completed, and so has every
// c[r] <= k) and the round it then read. Every round whose cookie had completed must be
// visible: round read >= the last r with c[r] <= k. The updater's removal store queues
// behind stores to cache lines the reader keeps writing (each a cache miss that drains
// slowly), which widens the window a missing fence leaves; the number of rounds only bounds
// how long a broken build gets to show itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "quiesce/rcu.hpp"

namespace quiesce {
namespace {

struct alignas(64) padded_word {
  std::atomic<std::uint64_t> v{0};
};

struct reader_record {
  std::uint64_t cookie = 0;  // taken before the reader's grace period
  std::uint64_t round = 0;   // what the reader read after it
};

// Release: a build without the fence misses ~9 times in 4,000,000 rounds on an AMD EPYC
// (the RCU_COOKIE_NO_FENCE mutant); the sanitizers' instrumented runs check fewer rounds.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::size_t rounds = 250'000;
#else
constexpr std::size_t rounds = 4'000'000;
#endif

// Domains with readers of their own (QSBR, Tasks): the reader is online and its grace
// periods are the only ones. (In the default domain a grace period's membarrier already
// drains the updater's store buffer.)
void cookie_after_removal_counts_no_earlier_period(rcu_domain& d) {
  constexpr std::size_t lines = 48;  // stores queued ahead of the removal's store
  constexpr std::size_t max_reads = 1'000'000;
  auto stuffing = std::make_unique<padded_word[]>(lines);
  std::vector<std::uint64_t> cookie_of(rounds + 1, 0);  // cookie_of[r]: taken after round r
  std::vector<reader_record> reads(max_reads);
  alignas(64) std::atomic<std::uint64_t> current{0};
  alignas(64) std::atomic<bool> done{false};
  std::size_t n_reads = 0;

  std::thread reader([&] {
    rcu_thread_online(d);
    while (!done.load(std::memory_order_relaxed) && n_reads < max_reads) {
      for (std::size_t k = 0; k < lines; ++k)  // own the updater's lines: its stores miss
        stuffing[k].v.store(k, std::memory_order_relaxed);
      const rcu_cookie k = rcu_get_cookie(d);
      rcu_synchronize(d);  // grace period k.gp has completed when this returns
      reads[n_reads++] = {k.gp, current.load(std::memory_order_acquire)};
    }
    rcu_thread_offline(d);
  });

  for (std::uint64_t r = 1; r <= rounds; ++r) {
    for (std::size_t k = 0; k < lines; ++k)
      stuffing[k].v.store(r, std::memory_order_relaxed);
    current.store(r, std::memory_order_release);  // the removal of round r - 1
    cookie_of[r] = rcu_get_cookie(d).gp;
  }
  done.store(true, std::memory_order_relaxed);
  reader.join();

  ASSERT_TRUE(std::is_sorted(cookie_of.begin() + 1, cookie_of.end()));
  std::size_t missed = 0, checked = 0;
  std::uint64_t first_round = 0, first_read = 0;
  for (std::size_t i = 0; i < n_reads; ++i) {
    // The last round whose cookie names grace period reads[i].cookie or an earlier one.
    const auto after = std::upper_bound(cookie_of.begin() + 1, cookie_of.end(), reads[i].cookie);
    const std::uint64_t must_see = static_cast<std::uint64_t>(after - (cookie_of.begin() + 1));
    checked += must_see > 0;
    if (reads[i].round < must_see && missed++ == 0) {
      first_round = must_see;
      first_read = reads[i].round;
    }
  }
  EXPECT_EQ(missed, 0u) << "reads after a grace period that a round's cookie named still saw "
                           "the round before it (first: round "
                        << first_read << " where round " << first_round << " was due; " << missed
                        << " of " << n_reads << " reads)";
  EXPECT_GT(checked, 0u) << "no read came after a grace period that a cookie named";
}

TEST(RcuOrdering, ACookieTakenAfterARemovalNeverCountsAGracePeriodThatMissedItQsbr) {
  cookie_after_removal_counts_no_earlier_period(rcu_qsbr_domain());
}

TEST(RcuOrdering, ACookieTakenAfterARemovalNeverCountsAGracePeriodThatMissedItTasks) {
  cookie_after_removal_counts_no_earlier_period(rcu_tasks_domain());
}

}  // namespace
}  // namespace quiesce
