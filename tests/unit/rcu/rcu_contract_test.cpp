// SPDX-License-Identifier: Apache-2.0
// Regression tests for RCU contract breaks (each failed before its fix):
// rcu_barrier() from an online QSBR thread, rcu_barrier() from a callback or deleter, the
// read-side nesting limit, and membarrier failing after the read side relied on it.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "quiesce/rcu.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using test::finishes_or_abort;
using test::generous;

// Guards against rcu_barrier(qsbr) from a thread that is online in QSBR waiting for its
// own quiescent state (the header promises such a caller is taken offline for the wait).
TEST(RcuContract, QsbrBarrierFromAnOnlineThreadReturnsAndLeavesItOnline) {
  rcu_domain& d = rcu_qsbr_domain();
  std::atomic<bool> ran{false}, online_after{false};
  finishes_or_abort(
      [&] {
        rcu_thread_online(d);
        rcu_call(d, [&] { ran = true; });
        rcu_barrier(d);
        online_after = rcu_thread_is_online(d);
        rcu_thread_offline(d);
      },
      generous, "rcu_barrier(rcu_qsbr_domain()) from an online thread");
  EXPECT_TRUE(ran.load()) << "rcu_barrier returned before the callback queued before it ran";
  EXPECT_TRUE(online_after.load()) << "the caller was not put back online";
}

// Guards against rcu_barrier() from a callback hanging: the callback thread waited for a
// barrier node that only it could run. The barrier must also have run what it waits for:
// a callback queued by the same callback just before, and one queued earlier in the same
// batch.
void barrier_from_a_callback(rcu_domain& d) {
  std::atomic<bool> inner_ran{false}, sibling_ran{false}, inner_ran_at_barrier{false},
      sibling_ran_at_barrier{false}, outer_done{false};
  finishes_or_abort(
      [&] {
        rcu_call(d, [&] {
          rcu_call(d, [&] { inner_ran = true; });
          rcu_barrier(d);
          inner_ran_at_barrier = inner_ran.load();
          sibling_ran_at_barrier = sibling_ran.load();
          outer_done = true;
        });
        rcu_call(d, [&] { sibling_ran = true; });  // after it in the same batch, or the next
        rcu_barrier(d);
      },
      generous, "rcu_barrier() called from an RCU callback");
  // The outer barrier was queued after the callback: it returns only once that callback has
  // returned, even though the callback's own barrier ran the rest of its batch early.
  EXPECT_TRUE(outer_done.load()) << d.name()
                                 << ": rcu_barrier returned before a callback "
                                    "queued before it had finished";
  EXPECT_TRUE(inner_ran_at_barrier.load()) << d.name();
  // The sibling was queued before the inner barrier only if it was queued before that
  // callback ran; either way it has run once the outer barrier returned.
  EXPECT_TRUE(sibling_ran.load()) << d.name();
}

TEST(RcuContract, BarrierFromACallbackOfTheDefaultDomain) {
  barrier_from_a_callback(rcu_default_domain());
}
TEST(RcuContract, BarrierFromACallbackOfTheQsbrDomain) {
  barrier_from_a_callback(rcu_qsbr_domain());
}
TEST(RcuContract, BarrierFromACallbackOfTheTasksDomain) {
  barrier_from_a_callback(rcu_tasks_domain());
}

// The same from a deleter (rcu_retire with a deleter that calls rcu_barrier).
TEST(RcuContract, BarrierFromADeleterReturns) {
  std::atomic<bool> deleted{false};
  struct object {
    int value = 7;
  };
  finishes_or_abort(
      [&] {
        rcu_retire(new object, [&](object* p) {
          rcu_barrier();
          delete p;
          deleted = true;
        });
        rcu_barrier();
      },
      generous, "rcu_barrier() called from a deleter");
  EXPECT_TRUE(deleted.load());
}

// Guards against the nesting depth carrying into the grace-period number at 65,536 levels
// (a reader that deep looked idle): lock() at the limit aborts, naming the depth.
TEST(RcuContractDeathTest, NestingBeyondTheLimitAbortsNamingTheDepth) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        rcu_domain& d = rcu_default_domain();
        for (int i = 0; i < 65535; ++i)
          d.lock();
        d.lock();  // the 65,536th level
      },
      "nested 65536 levels deep");
}

#if defined(__x86_64__)
constexpr std::uint32_t this_audit_arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t this_audit_arch = AUDIT_ARCH_AARCH64;
#else
constexpr std::uint32_t this_audit_arch = 0;  // unknown: the test is skipped
#endif

// From now on, membarrier() fails with EPERM in this process (a seccomp filter; as a
// container runtime's policy or a sandbox can do after the program started).
void make_membarrier_fail() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, this_audit_arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_membarrier, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    std::perror("installing the seccomp filter");
    std::_Exit(3);  // not the expected message: the death test fails loudly
  }
}

// Guards against the writer falling back to a fence when membarrier fails after start-up:
// readers registered while membarrier worked use compiler barriers only, so a grace period
// without the IPI is unsound - rcu_synchronize() must abort naming membarrier, not return.
TEST(RcuContractDeathTest, MembarrierFailingAfterStartUpAbortsTheGracePeriod) {
  if (!rcu_domain_stats(rcu_default_domain()).membarrier) {
    GTEST_SKIP() << "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is not in use here";
  }
  if (this_audit_arch == 0) GTEST_SKIP() << "no seccomp architecture constant for this CPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        make_membarrier_fail();
        rcu_synchronize(rcu_default_domain());
        std::fputs("rcu_synchronize returned without its membarrier\n", stderr);
        std::_Exit(0);
      },
      "membarrier\\(MEMBARRIER_CMD_PRIVATE_EXPEDITED\\) failed after it was registered");
}

}  // namespace
}  // namespace quiesce
