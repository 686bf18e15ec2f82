// Clang thread-safety annotations (-Wthread-safety), and the annotated mutex and guards
// the runtime uses, so that the protection legends are checked by the compiler where it can
// express them (abseil's ABSL_GUARDED_BY and absl::Mutex are the model). Under other
// compilers the annotations expand to nothing. Not installed.
#pragma once

#include <mutex>

#include "deferred_wake.hpp"

#if defined(__clang__)
#define QUIESCE_TSA(x) __attribute__((x))
#else
#define QUIESCE_TSA(x)
#endif

#define QUIESCE_CAPABILITY(x) QUIESCE_TSA(capability(x))
#define QUIESCE_SCOPED_CAPABILITY QUIESCE_TSA(scoped_lockable)
#define QUIESCE_GUARDED_BY(x) QUIESCE_TSA(guarded_by(x))
#define QUIESCE_PT_GUARDED_BY(x) QUIESCE_TSA(pt_guarded_by(x))
#define QUIESCE_REQUIRES(...) QUIESCE_TSA(requires_capability(__VA_ARGS__))
#define QUIESCE_ACQUIRE(...) QUIESCE_TSA(acquire_capability(__VA_ARGS__))
#define QUIESCE_RELEASE(...) QUIESCE_TSA(release_capability(__VA_ARGS__))
#define QUIESCE_TRY_ACQUIRE(...) QUIESCE_TSA(try_acquire_capability(__VA_ARGS__))
#define QUIESCE_EXCLUDES(...) QUIESCE_TSA(locks_excluded(__VA_ARGS__))
#define QUIESCE_ASSERT_CAPABILITY(x) QUIESCE_TSA(assert_capability(x))
#define QUIESCE_RETURN_CAPABILITY(x) QUIESCE_TSA(lock_returned(x))
#define QUIESCE_NO_THREAD_SAFETY_ANALYSIS QUIESCE_TSA(no_thread_safety_analysis)

namespace quiesce::detail {

// std::mutex with annotations. native() is for condition-variable waits only.
class QUIESCE_CAPABILITY("mutex") mutex {
 public:
  void lock() QUIESCE_ACQUIRE() { m_.lock(); }
  bool try_lock() QUIESCE_TRY_ACQUIRE(true) { return m_.try_lock(); }
  // Then sends the wake-ups deferred while it was held (deferred_wake.hpp).
  void unlock() QUIESCE_RELEASE() {
    m_.unlock();
    run_deferred_wakes();
  }
  // Tells the analysis that the lock is held where it cannot see it: one lock reached
  // through two names (a domain that shares its pool's lock, a worker's pool).
  void assert_held() const QUIESCE_ASSERT_CAPABILITY(this) {}
  std::mutex& native() noexcept { return m_; }

 private:
  std::mutex m_;
};

// std::lock_guard for detail::mutex.
class QUIESCE_SCOPED_CAPABILITY lock_guard {
 public:
  explicit lock_guard(mutex& m) QUIESCE_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~lock_guard() QUIESCE_RELEASE() { m_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  mutex& m_;
};

// std::unique_lock for detail::mutex: may be released and taken again; native() gives the
// std::unique_lock that condition variables wait with (held again when a wait returns).
class QUIESCE_SCOPED_CAPABILITY unique_lock {
 public:
  explicit unique_lock(mutex& m) QUIESCE_ACQUIRE(m) : lk_(m.native()) {}
  ~unique_lock() QUIESCE_RELEASE() {
    if (lk_.owns_lock()) lk_.unlock();
    run_deferred_wakes();
  }
  unique_lock(const unique_lock&) = delete;
  unique_lock& operator=(const unique_lock&) = delete;
  void lock() QUIESCE_ACQUIRE() { lk_.lock(); }
  void unlock() QUIESCE_RELEASE() {
    lk_.unlock();
    run_deferred_wakes();
  }
  // For a condition-variable wait, which releases the lock natively: the deferred wake-ups
  // are sent first (still under the lock).
  std::unique_lock<std::mutex>& native() noexcept {
    run_deferred_wakes();
    return lk_;
  }

 private:
  std::unique_lock<std::mutex> lk_;
};

}  // namespace quiesce::detail
