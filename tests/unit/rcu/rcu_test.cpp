// SPDX-License-Identifier: Apache-2.0
#include "quiesce/rcu.hpp"

#include <gtest/gtest.h>

#include <sched.h>
#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/rcu/internal.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"
#include "sched_idle.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::gate;

// Millisecond stall thresholds: a grace period held by a reader is reported quickly, which
// is how the tests learn - without timing - that a synchronize really is waiting.
watchdog_config fast_stalls() {
  watchdog_config c;
  c.tick = 1ms;
  c.rcu_stall = 20ms;
  c.rcu_tasks_stall = 20ms;
  c.rcu_tasks_info = 5ms;
  c.hung_task = 30ms;
  return c;
}

struct tracked_object {
  explicit tracked_object(std::atomic<bool>* f) : freed(f) {}
  ~tracked_object() { freed->store(true); }
  std::atomic<bool>* freed;
};

TEST(Rcu, DomainsMeetTheStandardShape) {
  rcu_domain& d = rcu_default_domain();
  {
    std::scoped_lock lock(d);  // Cpp17Lockable
    EXPECT_TRUE(d.try_lock());
    d.unlock();
  }
  EXPECT_STREQ(d.name(), "rcu");
  EXPECT_STREQ(rcu_qsbr_domain().name(), "rcu_qsbr");
  EXPECT_STREQ(rcu_tasks_domain().name(), "rcu_tasks");
  static_assert(!std::is_copy_constructible_v<rcu_domain>);
  static_assert(!std::is_default_constructible_v<rcu_domain>);
  rcu_synchronize();  // default argument
  rcu_barrier();
}

TEST(Rcu, SynchronizeWaitsForAPreExistingReader) {
  scoped_watchdog_config cfg(fast_stalls());
  log_capture capture;
  std::atomic<bool> freed{false};
  auto* obj = new tracked_object(&freed);  // owned by `current` until retired
  std::atomic<tracked_object*> current{obj};
  gate entered, release;
  std::atomic<bool> saw_freed{false};
  std::thread reader([&] {
    set_this_thread_name("rcu-reader");
    std::scoped_lock lock(rcu_default_domain());
    tracked_object* p = current.load(std::memory_order_acquire);
    entered.open();
    release.wait();
    saw_freed = p->freed->load();  // must still be alive
  });
  ASSERT_TRUE(entered.wait());
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    tracked_object* old = current.exchange(nullptr);
    rcu_synchronize();
    delete old;
    returned = true;
  });
  // Either the synchronize returned (broken) or the stall detector reports our reader.
  ASSERT_TRUE(eventually([&] {
    // (the holdout line follows the header: wait for it, not the header)
    return returned.load() || capture.count("\trcu-reader:") > 0;
  }));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(capture.count("INFO: rcu detected stalls on threads:"), 1u);
  EXPECT_EQ(capture.count("\trcu-reader:"), 1u);  // the holdout, by name and tid
  release.open();
  reader.join();
  writer.join();
  EXPECT_FALSE(saw_freed.load());
  EXPECT_TRUE(freed.load());
}

TEST(Rcu, SynchronizeDoesNotWaitForALaterReader) {
  scoped_watchdog_config cfg(fast_stalls());
  log_capture capture;
  gate first_in, first_out, second_in, second_out;
  std::thread early([&] {
    set_this_thread_name("rcu-early");
    std::scoped_lock lock(rcu_default_domain());
    first_in.open();
    first_out.wait();
  });
  ASSERT_TRUE(first_in.wait());
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    rcu_synchronize();
    returned = true;
  });
  // Once the stall detector names the early reader as the holdout, the grace period is
  // waiting for readers: a section that starts now is later than it.
  ASSERT_TRUE(eventually([&] { return capture.count("\trcu-early:") > 0; }));
  std::thread late([&] {
    std::scoped_lock lock(rcu_default_domain());
    second_in.open();
    second_out.wait();
  });
  ASSERT_TRUE(second_in.wait());
  first_out.open();
  EXPECT_TRUE(eventually([&] { return returned.load(); }));  // the late reader still holds
  second_out.open();
  early.join();
  late.join();
  writer.join();
}

TEST(Rcu, NestedSectionsEndAtTheOutermostUnlock) {
  rcu_domain& d = rcu_default_domain();
  d.lock();
  d.lock();
  d.unlock();
  log_capture capture;
  rcu_synchronize();  // still inside the outer section: misuse, returns at once
  EXPECT_EQ(capture.count("rcu_synchronize() called inside a read-side critical section"), 1u);
  rcu_barrier();
  EXPECT_EQ(capture.count("rcu_barrier() called inside a read-side critical section"), 1u);
  d.unlock();
  rcu_synchronize();  // fine now
  EXPECT_EQ(capture.lines().size(), 2u);
  EXPECT_EQ(rcu_domain_stats(d).misuse_reports, 2u);
}

TEST(Rcu, BarrierWaitsForEveryEarlierCallback) {
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i)
    rcu_call(rcu_default_domain(), [&ran] { ++ran; });
  rcu_barrier();
  EXPECT_EQ(ran.load(), 1000);
  const rcu_stats s = rcu_domain_stats(rcu_default_domain());
  EXPECT_GE(s.callbacks_invoked, 1000u);
  EXPECT_GE(s.callback_batches, 1u);
  EXPECT_THROW(rcu_call(rcu_default_domain(), nullptr), std::invalid_argument);
}

// The callback thread, asleep, is woken by the first callback queued after it fell asleep,
// once: it takes the sleep, so the callbacks queued before the thread runs pay no system
// call. Before, each of them woke it again (a burst of 2,000 after a quiet spell made ~530
// futex calls here). The thread is kept off the CPU for the burst (SCHED_IDLE, on the
// burst's CPU, which the burst never gives up), so that the whole burst falls in that window
// (kills rcu_wakes_every_enqueue). A burst in which it ran all the same tells nothing - the
// mutant's thread that runs after the first callback is woken no more (under load, one
// burst in two here: the mutant survived so) - and is tried again, until one in which it did
// not run.
TEST(Rcu, ABurstOfCallbacksWakesASleepingCallbackThreadOnce) {
  if (!test::may_leave_sched_idle()) GTEST_SKIP() << "a thread cannot leave SCHED_IDLE here";
  detail::rcu_callbacks& cb = detail::state_of(rcu_default_domain()).callbacks;
  rcu_barrier();
  const pid_t thread = test::thread_named("rcu_cb");
  ASSERT_NE(thread, 0) << "no callback thread";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (int burst = 1;; ++burst) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "in " << burst - 1 << " bursts the callback thread ran inside every one";
    ASSERT_TRUE(test::eventually([&cb] { return cb.sleeping.load(); }))
        << "the callback thread never went to sleep";
    std::uint64_t sent = 0, slept = 0;
    bool ran = false, asleep = false;
    std::atomic<int> called{0};
    {
      test::hold_off_cpu held(thread);
      asleep = cb.sleeping.load();
      const std::uint64_t wakeups = cb.wakeups.load();
      const std::uint64_t sleeps = cb.sleeps.load();
      for (int i = 0; i < 2000; ++i) {
        rcu_call(rcu_default_domain(),
                 [&called] { called.fetch_add(1, std::memory_order_relaxed); });
      }
      sent = cb.wakeups.load() - wakeups;
      ran = held.thread_ran();
      rcu_barrier();  // (this thread sleeps: the callback thread gets the CPU)
      slept = cb.sleeps.load() - sleeps;
    }
    EXPECT_EQ(called.load(), 2000);
    if (ran || !asleep) continue;  // it ran (or woke) before the burst ended
    // One wake-up per sleep at most: the one it was in, and any it began since.
    EXPECT_GE(sent, 1u);
    EXPECT_LE(sent, slept + 1) << "callbacks woke the thread more than once per sleep";
    return;
  }
}

// A reader of the default domain in its own thread: in its section from in() until
// release.
class held_reader {
 public:
  held_reader()
      : thread_([this] {
          std::scoped_lock section(rcu_default_domain());
          in_.open();
          (void)release_.wait();
        }) {
    (void)in_.wait();
  }
  void release() {
    release_.open();
    thread_.join();
  }
  ~held_reader() {
    if (thread_.joinable()) release();
  }

 private:
  test::gate in_, release_;
  std::thread thread_;
};

// A caller of rcu_synchronize whose grace period another caller runs returns when it ends,
// even if that caller takes the grace-period mutex straight back for another one. B needs
// grace period n+1 (it calls during n); A runs n, n+1 and n+2 back to back, n and n+1 held up
// by readers, and n+2 by a reader that stays in its section; B shares A's CPU at SCHED_IDLE,
// so it runs only while A sleeps - inside n+2, holding the mutex. Before, B waited for the
// mutex, here for ever (10 ms with two callers in loops; kills rcu_sync_waits_for_mutex).
TEST(Rcu, ASynchronizeServedByAnothersGracePeriodDoesNotWaitForTheMutex) {
  rcu_domain& d = rcu_default_domain();
  rcu_barrier();
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(::sched_getcpu(), &one);
  auto started = [&d] { return rcu_domain_stats(d).gp_started; };
  auto waiting = [&d] { return rcu_domain_stats(d).waiting_threads; };
  const std::uint64_t n = started() + 1;
  held_reader r1;
  std::thread a([&one] {
    (void)::sched_setaffinity(0, sizeof(one), &one);
    rcu_synchronize();  // n, until r1 leaves
    rcu_synchronize();  // n + 1, until r1b leaves
    rcu_synchronize();  // n + 2, until r2 leaves
  });
  ASSERT_TRUE(test::eventually([&] { return started() == n && waiting() >= 1; }));
  held_reader r1b;  // in after n began: holds up n + 1
  std::atomic<bool> b_returned{false};
  std::thread b([&one, &b_returned] {
    const sched_param none{};
    (void)::sched_setaffinity(0, sizeof(one), &one);
    (void)::sched_setscheduler(0, SCHED_IDLE, &none);
    rcu_synchronize();  // needs n + 1
    b_returned = true;
  });
  ASSERT_TRUE(test::eventually([&] { return waiting() >= 2; })) << "B never waited";
  r1.release();
  ASSERT_TRUE(test::eventually([&] { return started() == n + 1; }));
  held_reader r2;  // in after n + 1 began: holds up n + 2
  r1b.release();
  ASSERT_TRUE(test::eventually([&] { return started() == n + 2; }));
  EXPECT_TRUE(test::eventually([&] { return b_returned.load(); }, 10s))
      << "a synchronize whose grace period had ended waited for the mutex";
  EXPECT_FALSE(rcu_domain_stats(d).gp_completed >= n + 2) << "n + 2 ended with r2 inside";
  r2.release();
  a.join();
  b.join();
}

TEST(Rcu, RetireNeverFreesWhileAReaderHoldsTheObject) {
  scoped_watchdog_config cfg(fast_stalls());
  log_capture capture;
  std::atomic<bool> freed{false};
  auto* obj = new tracked_object(&freed);
  std::atomic<tracked_object*> current{obj};
  gate entered, release;
  std::atomic<bool> saw_freed{false};
  std::thread reader([&] {
    set_this_thread_name("rcu-holder");
    std::scoped_lock lock(rcu_default_domain());
    tracked_object* p = current.load(std::memory_order_acquire);
    entered.open();
    release.wait();
    saw_freed = p->freed->load();
  });
  ASSERT_TRUE(entered.wait());
  rcu_retire(current.exchange(nullptr));
  std::atomic<bool> barrier_done{false};
  std::thread barrier([&] {
    rcu_barrier();
    barrier_done = true;
  });
  ASSERT_TRUE(eventually([&] {
    return freed.load() || capture.count("rcu-holder:") > 0;  // freed early, or reported
  }));
  EXPECT_FALSE(freed.load());
  release.open();
  reader.join();
  barrier.join();
  EXPECT_FALSE(saw_freed.load());
  EXPECT_TRUE(freed.load());
  EXPECT_TRUE(barrier_done.load());
}

struct node : rcu_obj_base<node> {
  explicit node(std::atomic<int>* d) : deleted(d) {}
  ~node() { ++*deleted; }
  std::atomic<int>* deleted;
};

TEST(Rcu, ObjBaseRetiresWithoutAllocating) {
  std::atomic<int> deleted{0};
  for (int i = 0; i < 100; ++i)
    (new node(&deleted))->retire();
  rcu_barrier();
  EXPECT_EQ(deleted.load(), 100);
}

struct throwing_deleter {
  throwing_deleter() = default;
  throwing_deleter(const throwing_deleter&) = default;
  throwing_deleter(throwing_deleter&&) { throw std::bad_alloc(); }
  void operator()(int* p) const { delete p; }
};

TEST(Rcu, RetireThatThrowsSchedulesNothing) {
  auto p = std::make_unique<int>(7);
  const auto queued = rcu_domain_stats(rcu_default_domain()).callbacks_queued;
  EXPECT_THROW(rcu_retire(p.get(), throwing_deleter{}), std::bad_alloc);
  EXPECT_EQ(rcu_domain_stats(rcu_default_domain()).callbacks_queued, queued);
  EXPECT_EQ(*p, 7);  // untouched, still ours
}

TEST(Rcu, ThreadExitDuringAGracePeriodReleasesIt) {
  gate entered, leave;
  std::thread reader([&] {
    rcu_default_domain().lock();
    entered.open();
    leave.wait();
    rcu_default_domain().unlock();
  });  // and exits: unregisters while the grace period may be waiting on it
  ASSERT_TRUE(entered.wait());
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    rcu_synchronize();
    returned = true;
  });
  leave.open();
  reader.join();
  writer.join();
  EXPECT_TRUE(returned.load());
  // An online QSBR thread that exits is taken offline.
  std::thread q([] { rcu_thread_online(rcu_qsbr_domain()); });
  q.join();
  rcu_synchronize(rcu_qsbr_domain());
}

TEST(Rcu, ConcurrentSynchronizeCallersShareGracePeriods) {
  constexpr int callers = 6;
  gate entered, release;
  std::thread reader([&] {
    std::scoped_lock lock(rcu_default_domain());
    entered.open();
    release.wait();
  });
  ASSERT_TRUE(entered.wait());
  const rcu_stats before = rcu_domain_stats(rcu_default_domain());
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i)
    threads.emplace_back([] { rcu_synchronize(); });
  // All callers block behind the reader's grace period.
  ASSERT_TRUE(eventually(
      [&] { return rcu_domain_stats(rcu_default_domain()).waiting_threads == callers; }));
  release.open();
  for (auto& t : threads)
    t.join();
  reader.join();
  const rcu_stats after = rcu_domain_stats(rcu_default_domain());
  EXPECT_EQ(after.synchronize_calls - before.synchronize_calls, static_cast<unsigned>(callers));
  // One grace period in progress when they queued, plus at most one shared by the rest.
  EXPECT_LE(after.gp_completed - before.gp_completed, 2u);
  EXPECT_GE(after.synchronize_shared - before.synchronize_shared,
            static_cast<unsigned>(callers - 2));
}

TEST(Rcu, PollingCookies) {
  rcu_domain& d = rcu_default_domain();
  const rcu_cookie c = rcu_get_cookie(d);
  EXPECT_FALSE(rcu_poll_done(d, c));
  rcu_synchronize(d);
  EXPECT_TRUE(rcu_poll_done(d, c));
  const rcu_cookie started = rcu_start_poll(d);  // no synchronize from us: it still completes
  EXPECT_TRUE(eventually([&] { return rcu_poll_done(d, started); }));
}

TEST(Rcu, StatsCountGracePeriodsAndDurations) {
  const rcu_stats before = rcu_domain_stats(rcu_default_domain());
  for (int i = 0; i < 5; ++i)
    rcu_synchronize();
  const rcu_stats after = rcu_domain_stats(rcu_default_domain());
  EXPECT_EQ(after.gp_completed - before.gp_completed, 5u);
  EXPECT_EQ(after.gp_started, after.gp_completed);
  EXPECT_EQ(after.gp_duration_ns.count() - before.gp_duration_ns.count(), 5u);
  // No reader held them: each waited for no one, and counts as 0 ns (not timed).
  EXPECT_EQ(after.gp_duration_ns.bucket(0) - before.gp_duration_ns.bucket(0), 5u);
  EXPECT_EQ(after.domain, "rcu");
}

TEST(Rcu, AGracePeriodThatWaitsForAReaderIsTimedFromTheScanThatFoundIt) {
  rcu_domain& d = rcu_default_domain();
  gate inside, leave;
  std::thread reader([&] {
    std::scoped_lock section(d);
    inside.open();
    leave.wait();
  });
  ASSERT_TRUE(inside.wait());
  const rcu_stats before = rcu_domain_stats(d);
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    rcu_synchronize(d);
    returned = true;
  });
  // Blocked: its first scan found the reader (and started the clock) before it slept.
  ASSERT_TRUE(eventually([&] { return rcu_domain_stats(d).waiting_threads > 0; }));
  constexpr auto held = 20ms;
  std::this_thread::sleep_for(held);
  EXPECT_FALSE(returned.load());
  leave.open();
  writer.join();
  reader.join();
  const rcu_stats after = rcu_domain_stats(d);
  EXPECT_EQ(after.gp_duration_ns.count() - before.gp_duration_ns.count(), 1u);
  EXPECT_EQ(after.gp_duration_ns.bucket(0), before.gp_duration_ns.bucket(0));
  EXPECT_GE(after.gp_duration_ns.max(),
            static_cast<std::uint64_t>(std::chrono::nanoseconds(held).count()));
}

// ---- QSBR ----

TEST(RcuQsbr, OnlineThreadHoldsGracePeriodsUntilItReports) {
  gate online, report, offline;
  std::thread reader([&] {
    rcu_thread_online(rcu_qsbr_domain());
    online.open();
    report.wait();
    rcu_quiescent_state(rcu_qsbr_domain());
    offline.wait();
    rcu_thread_offline(rcu_qsbr_domain());
  });
  ASSERT_TRUE(online.wait());
  scoped_watchdog_config cfg(fast_stalls());
  log_capture capture;
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    rcu_synchronize(rcu_qsbr_domain());
    returned = true;
  });
  ASSERT_TRUE(eventually([&] {
    return returned.load() || capture.count("INFO: rcu_qsbr detected stalls on threads:") > 0;
  }));
  EXPECT_FALSE(returned.load());
  report.open();  // a quiescent state ends it
  EXPECT_TRUE(eventually([&] { return returned.load(); }));
  writer.join();
  // Offline threads hold nothing.
  offline.open();
  reader.join();
  rcu_synchronize(rcu_qsbr_domain());
}

TEST(RcuQsbr, SynchronizeFromAnOnlineThreadDoesNotWaitForItself) {
  std::thread t([] {
    rcu_thread_online(rcu_qsbr_domain());
    rcu_synchronize(rcu_qsbr_domain());
    EXPECT_TRUE(rcu_thread_is_online(rcu_qsbr_domain()));  // back online after
    rcu_thread_offline(rcu_qsbr_domain());
    EXPECT_FALSE(rcu_thread_is_online(rcu_qsbr_domain()));
  });
  t.join();
  EXPECT_THROW(rcu_thread_online(rcu_default_domain()), std::invalid_argument);
}

// A quiescent state reported while offline reports nothing: the thread stays offline, so
// grace periods do not wait for it (QSBR and Tasks share the path).
TEST(RcuQsbr, QuiescentStateWhileOfflineLeavesTheThreadOffline) {
  for (rcu_domain* d : {&rcu_qsbr_domain(), &rcu_tasks_domain()}) {
    std::thread t([d] {
      rcu_thread_online(*d);
      rcu_thread_offline(*d);
      rcu_synchronize(*d);  // a grace period has passed since the thread went offline
      rcu_quiescent_state(*d);
      EXPECT_FALSE(rcu_thread_is_online(*d)) << d->name();
    });
    t.join();
  }
}

// ---- Tasks ----

// A registered thread spinning with cond_resched() holds the Tasks grace period (seed 003);
// one calling cond_resched_tasks_qs() does not.
TEST(RcuTasks, CondReschedAloneHoldsTheGracePeriod) {
  scoped_watchdog_config cfg(fast_stalls());
  log_capture capture;
  std::atomic<bool> stop{false}, report_qs{false};
  gate online;
  std::thread spinner([&] {
    set_this_thread_name("ksgxd");
    rcu_thread_online(rcu_tasks_domain());
    online.open();
    while (!stop.load()) {
      if (report_qs.load()) {
        cond_resched_tasks_qs();
      } else {
        cond_resched();  // yields, reports nothing
      }
    }
    rcu_thread_offline(rcu_tasks_domain());
  });
  ASSERT_TRUE(online.wait());
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    set_this_thread_name("systemd");
    rcu_synchronize(rcu_tasks_domain());
    returned = true;
  });
  ASSERT_TRUE(eventually([&] {
    return returned.load() || capture.count("\tksgxd:") > 0;  // the holdout is the spinner
  }));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(capture.count("INFO: rcu_tasks detected stalls on threads:"), 1u);
  EXPECT_EQ(capture.count("\tksgxd:"), 1u);
  EXPECT_GE(capture.count("rcu_tasks_wait_gp: rcu_tasks grace period number "), 1u);
  ASSERT_TRUE(eventually([&] { return capture.count("INFO: task systemd:") > 0; }));
  EXPECT_EQ(capture.count("blocked for more than 0.030 seconds."), 1u);
  report_qs = true;  // the patch: cond_resched_tasks_qs() in the loop
  EXPECT_TRUE(eventually([&] { return returned.load(); }));
  waiter.join();
  // With the patch from the start, grace periods complete while it spins.
  rcu_synchronize(rcu_tasks_domain());
  rcu_synchronize(rcu_tasks_domain());
  stop = true;
  spinner.join();
  const rcu_stats s = rcu_domain_stats(rcu_tasks_domain());
  EXPECT_GE(s.stalls, 1u);
  EXPECT_GE(s.hung_waiters, 1u);
  EXPECT_GE(s.stall_infos, 1u);
}

TEST(RcuTasks, BlockingInQuiescePrimitivesIsAQuiescentState) {
  gate blocked, release;
  std::thread t([&] {
    rcu_thread_online(rcu_tasks_domain());
    {
      may_block blocking;  // a voluntary block: offline for the Tasks domain
      blocked.open();
      release.wait();
    }
    EXPECT_TRUE(rcu_thread_is_online(rcu_tasks_domain()));
    rcu_thread_offline(rcu_tasks_domain());
  });
  ASSERT_TRUE(blocked.wait());
  rcu_synchronize(rcu_tasks_domain());  // does not wait for the blocked thread
  release.open();
  t.join();
}

TEST(RcuTasks, AnIdleRegisteredWorkerHoldsNothing) {
  workqueue wq("tasks-worker");
  work reg("register", [](work&) { rcu_thread_online(rcu_tasks_domain()); });
  ASSERT_TRUE(wq.queue_on(system_topology().cpus().first(), reg));
  wq.flush();
  // The worker that ran it is online in the Tasks domain, but now idle: quiescent.
  EXPECT_GE(rcu_domain_stats(rcu_tasks_domain()).registered_threads, 1);
  rcu_synchronize(rcu_tasks_domain());
}

}  // namespace
}  // namespace quiesce
