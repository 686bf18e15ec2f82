// SPDX-License-Identifier: Apache-2.0
// The runtime's own locks, checked: in the checked builds (sanitizer and debug presets) a
// function that requires a lock, called without it, dies naming the lock - the kernel's
// lockdep_assert_held() (src/base/mutex.hpp). Release keeps assert_held() free.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cpus.hpp"
#include "internal.hpp"

namespace quiesce {
namespace {

TEST(WqLockdepDeathTest, KickingAPoolWithoutItsLockDiesNamingTheLock) {
  if (!detail::checked_locks) GTEST_SKIP() << "release build: assert_held() checks nothing";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        detail::pool& p = detail::bound_pool(test::first_cpu(), false);
        detail::kick_pool_locked(p);  // deliberately without p.lock
      },
      "lock 'wq pool::lock' .* is not held by the thread that asserts it is");
}

TEST(WqLockdepDeathTest, KickingAPoolWithItsLockPasses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        detail::pool& p = detail::bound_pool(test::first_cpu(), false);
        {
          detail::lock_guard guard(p.lock);
          detail::kick_pool_locked(p);
        }
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace quiesce
