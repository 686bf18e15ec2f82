// SPDX-License-Identifier: Apache-2.0
// The runtime's own threads (workqueue workers, the delayed-work timer, the watchdog, RCU's
// callback thread) take none of the process's asynchronous signals: each is created while
// its creator holds them blocked (async_signals_blocked), and inherits that mask. So a
// process-directed signal - SIGINT, SIGTERM, a SIGUSR1 - is handled on one of the
// application's threads, never in the middle of a work item or a grace period on a runtime
// thread, and never left pending on a runtime thread that sleeps (a thread sanitizer defers
// a handler until its thread next enters the C library). The kernel's kthreads take no
// signals either. Synchronous signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and
// SIGABRT stay deliverable - blocked, a fault would kill the process without its handlers -
// and so does SIGPROF, for profilers. A process a runtime thread starts (a work item's
// posix_spawn or fork) inherits that mask, as from any thread: such code sets the child's
// (posix_spawnattr_setsigmask, or pthread_sigmask after fork) - libuv's pool threads make
// the same trade. Not installed.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace quiesce::detail {

class async_signals_blocked {
 public:
  // Sets the calling thread's mask to exactly that set (not added to the creator's: a
  // creator that blocks SIGSEGV, say, must not pass it on). `block` false (a mutant's
  // runtime) leaves the mask as it is.
  explicit async_signals_blocked(bool block = true) noexcept {
    sigset_t set;
    ::sigfillset(&set);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPROF})
      ::sigdelset(&set, s);
    // (glibc keeps its own SIGCANCEL and SIGSETXID deliverable whatever the set says.)
    if (block) {
      ::pthread_sigmask(SIG_SETMASK, &set, &old_);
    } else {
      ::pthread_sigmask(SIG_BLOCK, nullptr, &old_);
    }
  }
  ~async_signals_blocked() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  async_signals_blocked(const async_signals_blocked&) = delete;
  async_signals_blocked& operator=(const async_signals_blocked&) = delete;

 private:
  sigset_t old_;
};

}  // namespace quiesce::detail
