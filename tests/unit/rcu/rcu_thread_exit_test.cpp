// SPDX-License-Identifier: Apache-2.0
// Readers during thread exit: a read-side section entered in the
// destructor of a thread_local - one constructed before the thread's first lock() or
// rcu_thread_online(), so destroyed after any thread_local quiesce might have used for its
// registration - must still hold grace periods. Before the fix the thread's registration
// was already gone there while the thread still believed itself registered, and
// rcu_synchronize() returned while it read.
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <string>
#include <thread>

#include "quiesce/rcu.hpp"
#include "quiesce/thread.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using test::eventually;
using test::generous;

enum class flavor { memb, qsbr, tasks };

rcu_domain& domain_of(flavor f) {
  switch (f) {
    case flavor::memb:
      return rcu_default_domain();
    case flavor::qsbr:
      return rcu_qsbr_domain();
    case flavor::tasks:
      break;
  }
  return rcu_tasks_domain();
}

// Shared by the exiting reader and the test.
struct exit_probe {
  flavor f = flavor::memb;
  std::atomic<bool> in_section{false};       // the destructor entered its section
  std::atomic<bool> sync_calling{false};     // the synchronizer is about to wait
  std::atomic<pid_t> sync_tid{0};            // ... on this thread
  std::atomic<bool> sync_returned{false};    // rcu_synchronize() returned
  std::atomic<bool> returned_inside{false};  // ... while the section was open: the bug
  std::atomic<bool> left_section{false};
  std::atomic<bool> was_registered{false};  // the thread was registered on entering
};
exit_probe* g_probe = nullptr;

// Whether thread `tid` sleeps; false once it has exited (its /proc entry is gone).
bool asleep(pid_t tid) {
  try {
    return test::thread_state(tid) == 'S';
  } catch (const std::exception&) {
    return false;
  }
}

// Enters a read-side section, and holds it until the synchronizer either returned (the bug)
// or is asleep waiting (for us). Run from the exiting thread's destructors.
void read_while_exiting() {
  exit_probe& p = *g_probe;
  rcu_domain& d = domain_of(p.f);
  p.was_registered = rcu_thread_is_online(d);
  if (p.f == flavor::memb) {
    d.lock();
  } else {
    rcu_thread_online(d);  // holds grace periods until its next quiescent state
  }
  p.in_section = true;
  const bool decided = eventually(
      [&] {
        if (p.sync_returned.load()) return true;
        const pid_t tid = p.sync_tid.load();
        return p.sync_calling.load() && tid != 0 && asleep(tid);
      },
      generous);
  p.returned_inside = p.sync_returned.load();
  if (!decided) p.returned_inside = true;  // neither: report, do not hang
  if (p.f == flavor::memb) {
    d.unlock();
  } else {
    rcu_thread_offline(d);
  }
  p.left_section = true;
}

struct reads_at_exit {
  bool armed = false;
  ~reads_at_exit() {
    if (armed) read_while_exiting();
  }
};

thread_local reads_at_exit tls_reads_at_exit;

// Where the exiting thread reads: in a thread_local destructor, or in a pthread key
// destructor once quiesce's own has taken the thread out of the registry (glibc runs a
// round's key destructors in key order, and one that sets its key again in a next round).
enum class exit_stage { thread_local_destructor, after_unregistration };

void reader_in_thread_exit(flavor f, bool used_before,
                           exit_stage stage = exit_stage::thread_local_destructor) {
  exit_probe probe;
  probe.f = f;
  g_probe = &probe;
  pthread_key_t late_key{};
  if (stage == exit_stage::after_unregistration) {
    static pthread_key_t key;  // the destructor's own (a captureless lambda)
    ASSERT_EQ(::pthread_key_create(&key,
                                   [](void* arg) {
                                     // Should a reused lower key run before quiesce's, wait for the
                                     // next round.
                                     if (rcu_thread_is_online(rcu_default_domain())) {
                                       ::pthread_setspecific(key, arg);
                                       return;
                                     }
                                     read_while_exiting();
                                   }),
              0);
    late_key = key;
  }
  std::thread reader([&] {
    if (stage == exit_stage::after_unregistration) {
      ::pthread_setspecific(late_key, &probe);
    } else {
      tls_reads_at_exit.armed = true;  // constructed first: destroyed last
    }
    if (used_before) {
      rcu_domain& d = domain_of(f);
      if (f == flavor::memb) {
        d.lock();
        d.unlock();
      } else {
        rcu_thread_online(d);
        rcu_thread_offline(d);
      }
    }
  });
  ASSERT_TRUE(eventually([&] { return probe.in_section.load(); }))
      << "the thread_local destructor never entered its section";
  std::thread sync([&] {
    probe.sync_tid = this_thread_tid();
    probe.sync_calling = true;
    rcu_synchronize(domain_of(f));
    probe.sync_returned = true;
  });
  sync.join();
  reader.join();
  if (stage == exit_stage::after_unregistration) {
    ::pthread_key_delete(late_key);
    EXPECT_FALSE(probe.was_registered.load()) << "the thread was still registered";
  }
  EXPECT_TRUE(probe.left_section.load());
  EXPECT_FALSE(probe.returned_inside.load())
      << domain_of(f).name()
      << ": rcu_synchronize() returned while the exiting thread was inside a read-side "
         "section (it was not in the registry)";
  g_probe = nullptr;
}

TEST(RcuThreadExit, DefaultDomainReaderInAThreadLocalDestructorHoldsGracePeriods) {
  reader_in_thread_exit(flavor::memb, /*used_before=*/true);
}
TEST(RcuThreadExit, DefaultDomainFirstLockInAThreadLocalDestructorHoldsGracePeriods) {
  reader_in_thread_exit(flavor::memb, /*used_before=*/false);
}
// After quiesce's key destructor took the thread out of the registry, a lock() registers it
// again (and it leaves again in the next destructor round).
TEST(RcuThreadExit, DefaultDomainLockAfterUnregistrationHoldsGracePeriods) {
  reader_in_thread_exit(flavor::memb, /*used_before=*/true, exit_stage::after_unregistration);
}
TEST(RcuThreadExit, QsbrOnlineInAThreadLocalDestructorHoldsGracePeriods) {
  reader_in_thread_exit(flavor::qsbr, /*used_before=*/true);
}
TEST(RcuThreadExit, TasksOnlineInAThreadLocalDestructorHoldsGracePeriods) {
  reader_in_thread_exit(flavor::tasks, /*used_before=*/true);
}

// The thread is gone from every registry once it has exited, however it registered.
TEST(RcuThreadExit, AnExitedThreadLeavesEveryRegistry) {
  const auto count = [](rcu_domain& d) { return rcu_domain_stats(d).registered_threads; };
  const int memb0 = count(rcu_default_domain()), qsbr0 = count(rcu_qsbr_domain()),
            tasks0 = count(rcu_tasks_domain());
  for (int i = 0; i < 20; ++i) {
    std::thread([] {
      rcu_default_domain().lock();
      rcu_default_domain().unlock();
      rcu_thread_online(rcu_qsbr_domain());  // exits online: taken offline at exit
      rcu_thread_online(rcu_tasks_domain());
    }).join();
  }
  EXPECT_EQ(count(rcu_default_domain()), memb0);
  EXPECT_EQ(count(rcu_qsbr_domain()), qsbr0);
  EXPECT_EQ(count(rcu_tasks_domain()), tasks0);
  rcu_synchronize(rcu_qsbr_domain());  // would hang on a dead online thread
  rcu_synchronize(rcu_tasks_domain());
}

}  // namespace
}  // namespace quiesce
