// SPDX-License-Identifier: Apache-2.0
// The runtime's mutex and guards: std::mutex (of glibc's adaptive kind: a bounded spin
// before the futex) with clang's thread-safety annotations (thread_annotations.hpp), the
// wake-ups deferred while it is held sent on unlock (deferred_wake.hpp), and - in checked
// builds - an owner, so that assert_held() is the kernel's lockdep_assert_held(): it aborts
// (die()) when the calling thread does not hold the lock. Checked builds are the sanitizer
// and debug presets (QUIESCE_CHECKED_LOCKS, set by cmake/compile_options.cmake); release
// keeps the mutex a std::mutex and assert_held() free. Not installed.
//
// Protection legend of the owner: written only by the thread that holds the mutex (set
// after locking, cleared before unlocking or a condition-variable wait), read by any
// thread (relaxed: a thread compares it only with itself, and only its own writes can
// make it equal).
#pragma once

#include <pthread.h>

#include <atomic>
#include <mutex>

#include "deferred_wake.hpp"
#include "die.hpp"
#include "thread_annotations.hpp"

namespace quiesce::detail {

#if defined(QUIESCE_CHECKED_LOCKS)
inline constexpr bool checked_locks = true;
#else
inline constexpr bool checked_locks = false;
#endif

// A tag unique to each live thread (its address), for owner checks.
inline const void* this_thread_tag() noexcept {
  thread_local char tag;
  return &tag;
}

// W (the thread's own; the flag it points to is read by other threads, relaxed): where the
// calling thread says that it is waiting for one of the runtime's mutexes - a worker's
// in_lock_wait, so that the workqueue's sleep check does not take a worker waiting for a
// runtime lock for one asleep in its item (wq_watchdog.cpp). nullptr: nowhere.
inline thread_local std::atomic<bool>* tls_lock_wait_flag = nullptr;

// Takes `m`; while it has to wait for it, *tls_lock_wait_flag is true. (Uncontended: one
// compare-and-swap, as m.lock() alone.)
inline std::mutex& lock_marking_waits(std::mutex& m) {
  if (m.try_lock()) return m;
  std::atomic<bool>* const flag = tls_lock_wait_flag;
  if (flag) flag->store(true, std::memory_order_relaxed);
  m.lock();
  if (flag) flag->store(false, std::memory_order_relaxed);
  return m;
}

// std::mutex with annotations. Waits go through unique_lock::wait*, which keep the owner
// right across the wait.
class QUIESCE_CAPABILITY("mutex") mutex {
 public:
  mutex() noexcept { make_adaptive(); }
  // `name` (a string literal) names the lock in assert_held()'s report.
  explicit mutex(const char* name) noexcept : name_(name) { make_adaptive(); }
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  void lock() QUIESCE_ACQUIRE() {
    lock_marking_waits(m_);
    acquired();
  }
  bool try_lock() QUIESCE_TRY_ACQUIRE(true) {
    if (!m_.try_lock()) return false;
    acquired();
    return true;
  }
  // Then sends the wake-ups deferred while it was held (deferred_wake.hpp).
  void unlock() QUIESCE_RELEASE() {
    releasing();
    m_.unlock();
    run_deferred_wakes();
  }
  // The kernel's lockdep_assert_held(): in checked builds, aborts unless the calling thread
  // holds this mutex. Also tells the analysis that the lock is held where it cannot see it
  // (one lock reached through two names: a worker's pool).
  void assert_held() const QUIESCE_ASSERT_CAPABILITY(this) {
    if constexpr (checked_locks) {
      if (owner_.load(std::memory_order_relaxed) != this_thread_tag()) {
        die("BUG: lock '%s' (%p) is not held by the thread that asserts it is", name_,
            static_cast<const void*>(this));
      }
    }
  }

 private:
  friend class unique_lock;
  // The kernel's pool and domain locks are spinlocks: a waiter spins, as the holder runs a
  // few instructions and never sleeps. Here a holder can be preempted, so neither a pure
  // spin nor glibc's default (straight to the futex: a system call to sleep and one to be
  // woken, for a critical section of ~100 ns - the unbound pool's two workers took the lock
  // in turn for every item, issue 29) but glibc's adaptive kind: a bounded spin that reads
  // the lock word between tries, then the futex. Set before the mutex is first used.
  void make_adaptive() noexcept {
    pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    *m_.native_handle() = adaptive;
  }
  void acquired() noexcept {
    if constexpr (checked_locks) owner_.store(this_thread_tag(), std::memory_order_relaxed);
  }
  void releasing() noexcept {
    if constexpr (checked_locks) owner_.store(nullptr, std::memory_order_relaxed);
  }
  std::mutex m_;
  std::atomic<const void*> owner_{nullptr};  // checked builds only (see the legend)
  const char* const name_ = "unnamed";
};

// std::lock_guard for detail::mutex.
class QUIESCE_SCOPED_CAPABILITY lock_guard {
 public:
  explicit lock_guard(mutex& m) QUIESCE_ACQUIRE(m) : m_(m) { m_.lock(); }
  // Takes over `m`, which the caller holds (std::adopt_lock).
  lock_guard(mutex& m, std::adopt_lock_t) QUIESCE_REQUIRES(m) : m_(m) { m_.assert_held(); }
  ~lock_guard() QUIESCE_RELEASE() { m_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  mutex& m_;
};

// std::unique_lock for detail::mutex: may be released and taken again, and waits on a
// condition variable (held again when the wait returns).
class QUIESCE_SCOPED_CAPABILITY unique_lock {
 public:
  explicit unique_lock(mutex& m) QUIESCE_ACQUIRE(m)
      : m_(m), lk_(lock_marking_waits(m.m_), std::adopt_lock) {
    m_.acquired();
  }
  ~unique_lock() QUIESCE_RELEASE() {
    if (lk_.owns_lock()) {
      m_.releasing();
      lk_.unlock();
    }
    run_deferred_wakes();
  }
  unique_lock(const unique_lock&) = delete;
  unique_lock& operator=(const unique_lock&) = delete;
  void lock() QUIESCE_ACQUIRE() {
    lk_ = std::unique_lock<std::mutex>(lock_marking_waits(*lk_.release()), std::adopt_lock);
    m_.acquired();
  }
  void unlock() QUIESCE_RELEASE() {
    m_.releasing();
    lk_.unlock();
    run_deferred_wakes();
  }
  // Condition-variable waits, which release the lock natively: the deferred wake-ups are
  // sent first (still under the lock), and the owner is cleared for the wait.
  template <class Cv>
  void wait(Cv& cv) {
    run_deferred_wakes();
    m_.releasing();
    cv.wait(lk_);
    m_.acquired();
  }
  template <class Cv, class TimePoint>
  void wait_until(Cv& cv, const TimePoint& until) {
    run_deferred_wakes();
    m_.releasing();
    cv.wait_until(lk_, until);
    m_.acquired();
  }

 private:
  mutex& m_;
  std::unique_lock<std::mutex> lk_;
};

}  // namespace quiesce::detail
