// SPDX-License-Identifier: Apache-2.0
// The runtime's mutex (src/base/mutex.hpp): assert_held() is lockdep_assert_held() in the
// checked builds (sanitizer and debug presets) - it aborts unless the calling thread holds
// the lock, across unique_lock's unlock/lock and condition-variable waits.
#include "../../../src/base/mutex.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>

namespace quiesce::detail {
namespace {

TEST(Mutex, AssertHeldPassesForTheHolder) {
  mutex m;
  {
    lock_guard g(m);
    m.assert_held();
  }
  unique_lock u(m);
  m.assert_held();
  u.unlock();
  u.lock();
  m.assert_held();
}

TEST(Mutex, AssertHeldFollowsTheOwnerAcrossAConditionWait) {
  mutex m;
  std::condition_variable cv;
  bool ready = false;  // guarded by m
  std::thread t([&] {
    lock_guard g(m);
    m.assert_held();  // the waiter released it for its wait
    ready = true;
    cv.notify_one();
  });
  {
    unique_lock u(m);
    while (!ready)
      u.wait(cv);
    m.assert_held();
  }
  t.join();
}

TEST(MutexDeathTest, AssertHeldAbortsNamingTheLockWhenTheCallerDoesNotHoldIt) {
  if (!checked_locks) GTEST_SKIP() << "release build: assert_held() checks nothing (by design)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  mutex m{"test lock"};
  EXPECT_DEATH(m.assert_held(), "lock 'test lock' .* is not held by the thread that asserts it is");
  // Held, but by another thread.
  EXPECT_DEATH(
      {
        lock_guard g(m);
        std::thread([&] { m.assert_held(); }).join();
      },
      "lock 'test lock' .* is not held by the thread that asserts it is");
  // Released: no longer this thread's.
  EXPECT_DEATH(
      {
        unique_lock u(m);
        u.unlock();
        m.assert_held();
      },
      "lock 'test lock' .* is not held by the thread that asserts it is");
}

TEST(MutexDeathTest, AdoptingALockTheCallerDoesNotHoldAborts) {
  if (!checked_locks) GTEST_SKIP() << "release build: assert_held() checks nothing (by design)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  mutex m{"adopted lock"};
  EXPECT_DEATH(
      {
        lock_guard g(m, std::adopt_lock);
        (void)g;
      },
      "lock 'adopted lock' .* is not held");
}

}  // namespace
}  // namespace quiesce::detail
