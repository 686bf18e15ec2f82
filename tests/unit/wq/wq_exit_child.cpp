// SPDX-License-Identifier: Apache-2.0
// wq_exit_child SCENARIO: sets up work that is still queued, running, re-queueing itself or
// armed on the timer, then returns from main(). The process must exit with status 0, soon,
// and cleanly (no sanitizer or valgrind error): at exit queueing is refused, queued and
// armed items are dropped, running items finish, and nothing waits for user code.
// Status 2: the scenario could not be set up; 3: unknown scenario.
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "quiesce/clock.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"
#include "worker_creation_scenario.hpp"

namespace {

using namespace std::chrono_literals;
using quiesce::delayed_work;
using quiesce::work;
using quiesce::workqueue;

// Static objects destroyed at exit, in this order: g_static_wq, g_checker, g_stopper (the
// reverse of their definition). quiesce's exit hook, registered at the first queueing in
// main(), runs before all three.

// The last to be destroyed: releases items that wait for the process's static destruction
// to stop them (a common shape: a service object whose destructor stops its work).
struct stopper {
  std::mutex lock;
  std::condition_variable cv;
  bool stop = false;  // guarded by lock
  void wait() {
    std::unique_lock guard(lock);
    cv.wait(guard, [&] { return stop; });
  }
  ~stopper() {
    {
      std::lock_guard guard(lock);
      stop = true;
    }
    cv.notify_all();
  }
} g_stopper;

// Runs checks once the exit hook has run (set up by the scenarios; 0 = nothing to check).
struct checker {
  std::function<int()> check;
  ~checker() {
    if (!check) return;
    if (const int status = check(); status != 0) {
      std::fprintf(stderr, "wq_exit_child: exit check failed (%d)\n", status);
      std::fflush(stderr);
      _exit(status);
    }
  }
} g_checker;

// A namespace-scope static queue, destroyed by the exit sequence (its constructor creates
// the runtime, so the runtime outlives it).
workqueue g_static_wq("exit-static");

std::atomic<bool> main_returning{false};  // set just before main() returns

// Items and queues are leaked on purpose (a pending item must never be destroyed, and at
// exit they may still be queued). Kept reachable from a global so that LeakSanitizer does
// not report them once the runtime has dropped them.
void* g_kept[256];
std::atomic<int> g_nr_kept{0};
template <typename T>
T* keep(T* p) {
  g_kept[g_nr_kept.fetch_add(1) % 256] = p;
  return p;
}

// Polls (yielding) until pred() holds; false after 30 s. The child is allowed to poll.
template <typename Pred>
bool wait_until(Pred pred) {
  const std::uint64_t end = quiesce::now_ns() + 30'000'000'000u;
  while (!pred()) {
    if (quiesce::now_ns() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

work& forever_item(workqueue& wq, std::atomic<int>& runs) {
  return *keep(new work("resumable", [&wq, &runs](work& self) {
    ++runs;
    wq.queue(self);  // the resumable-work pattern: run again, for ever
  }));
}

// Items that re-queue themselves for ever on `wq`; returns once they have run a while.
int requeue_forever(workqueue& wq) {
  static std::atomic<int> runs{0};
  for (int i = 0; i < 4; ++i) {
    if (!wq.queue(forever_item(wq, runs))) return 2;
  }
  return wait_until([] { return runs.load() >= 1000; }) ? 0 : 2;
}

int scenario_requeue_system_wq() {
  return requeue_forever(quiesce::system_wq());
}
int scenario_requeue_system_unbound_wq() {
  return requeue_forever(quiesce::system_unbound_wq());
}
int scenario_requeue_heap_wq() {
  return requeue_forever(*keep(new workqueue("exit-heap")));  // never deleted
}
int scenario_requeue_static_wq() {
  return requeue_forever(g_static_wq);
}

// A running item on system_wq waits until main() is returning, then queues another item on
// its own CPU and flushes it.
int scenario_flush_at_exit() {
  static std::atomic<bool> started{false};
  auto* other = keep(new work("other", [](work&) {}));
  auto* flusher = keep(new work("flusher", [other](work&) {
    started = true;
    while (!main_returning.load())
      std::this_thread::yield();
    const int cpu = sched_getcpu();
    quiesce::system_wq().queue_on(cpu >= 0 ? cpu : 0, *other);
    other->flush();
  }));
  if (!quiesce::system_wq().queue(*flusher)) return 2;
  return wait_until([] { return started.load(); }) ? 0 : 2;
}

// Delayed items armed from 1 ms to 1 h on the system queues.
int scenario_delayed_system() {
  int i = 0;
  for (auto delay : {1ms, 5ms, 50ms, 1000ms, 3'600'000ms}) {
    for (workqueue* wq : {&quiesce::system_wq(), &quiesce::system_unbound_wq(),
                          &quiesce::system_highpri_wq(), &quiesce::system_long_wq()}) {
      auto* d = keep(new delayed_work("armed_" + std::to_string(i++), [](work&) {}));
      if (!wq->queue_delayed(*d, delay)) return 2;
    }
  }
  return 0;
}

// Delayed items armed from 1 ms to 1 h on a leaked heap queue and on the static queue.
int scenario_delayed_own() {
  auto* heap = keep(new workqueue("exit-heap-delayed"));
  int i = 0;
  for (auto delay : {1ms, 5ms, 50ms, 1000ms, 3'600'000ms}) {
    for (workqueue* wq : {heap, &g_static_wq}) {
      auto* d = keep(new delayed_work("own_armed_" + std::to_string(i++), [](work&) {}));
      if (!wq->queue_delayed(*d, delay)) return 2;
    }
  }
  return 0;
}

// Items re-arming themselves with mod_delayed, on system_wq and on the static queue.
int scenario_rearm_mod_delayed() {
  static std::atomic<int> runs{0};
  for (workqueue* wq : {&quiesce::system_wq(), &g_static_wq}) {
    auto* d = keep(new delayed_work("rearming", [wq](work& self) {
      ++runs;
      wq->mod_delayed(static_cast<delayed_work&>(self), 1ms);
    }));
    if (!wq->queue_delayed(*d, 1ms)) return 2;
  }
  return wait_until([] { return runs.load() >= 20; }) ? 0 : 2;
}

// Items that re-queue themselves and, once main() is returning, throw (the runtime logs
// each exception through the log sink while the process exits).
int scenario_throw_at_exit() {
  static std::atomic<int> runs{0};
  for (workqueue* wq : {&quiesce::system_wq(), &quiesce::system_unbound_wq(), &g_static_wq}) {
    auto* w = keep(new work("thrower", [wq](work& self) {
      ++runs;
      wq->queue(self);
      if (main_returning.load()) throw std::runtime_error("thrown at exit");
    }));
    if (!wq->queue(*w)) return 2;
  }
  return wait_until([] { return runs.load() >= 100; }) ? 0 : 2;
}

// Items that re-queue themselves and, once main() is returning, arm the timer.
int scenario_arm_at_exit() {
  static std::atomic<int> runs{0};
  for (workqueue* wq : {&quiesce::system_wq(), &quiesce::system_unbound_wq(), &g_static_wq}) {
    auto* later = keep(new delayed_work("armed_at_exit", [](work&) {}));
    auto* moved = keep(new delayed_work("moved_at_exit", [](work&) {}));
    auto* w = keep(new work("armer", [wq, later, moved](work& self) {
      ++runs;
      wq->queue(self);
      if (main_returning.load()) {
        wq->queue_delayed(*later, 1ms);
        wq->mod_delayed(*moved, 2ms);
      }
    }));
    if (!wq->queue(*w)) return 2;
  }
  return wait_until([] { return runs.load() >= 100; }) ? 0 : 2;
}

// After the exit hook, no new work is accepted: a queue() is refused (no user function
// starts after the hook).
int scenario_refused_after_exit() {
  static std::atomic<int> runs{0};
  if (!quiesce::system_wq().queue(forever_item(quiesce::system_wq(), runs))) return 2;
  g_checker.check = [] {
    auto* late = keep(new work("late", [](work&) {}));
    if (quiesce::system_wq().queue(*late)) return 4;  // accepted after the hook
    return 0;
  };
  return wait_until([] { return runs.load() >= 10; }) ? 0 : 2;
}

// A static queue's item runs until a static object destroyed after the queue stops it: the
// queue's destructor at exit must not wait for it.
int scenario_static_queue_running_item() {
  static std::atomic<bool> started{false};
  auto* w = keep(new work("until_stopped", [](work&) {
    started = true;
    g_stopper.wait();
  }));
  if (!g_static_wq.queue(*w)) return 2;
  return wait_until([] { return started.load(); }) ? 0 : 2;
}

// An item that blocks outside quiesce until the last static destructor is no news: the
// watchdog's sleep detection and CPU-hog report off.
void let_items_block_quietly() {
  quiesce::watchdog_config c = quiesce::get_watchdog_config();
  c.wq_sleep_detection = false;
  c.wq_cpu_intensive = std::chrono::nanoseconds::zero();
  quiesce::set_watchdog_config(c);
}

// An item blocks (outside quiesce, with the watchdog's sleep detection off) on its per-CPU
// pool until the last static destructor; an item queued behind it on the same CPU must be
// dropped at exit all the same, so that flushing it returns.
int scenario_dropped_behind_blocked() {
  let_items_block_quietly();
  static std::atomic<bool> started{false};
  static std::atomic<int> cpu{0};
  auto* blocker = keep(new work("blocker", [](work&) {
    cpu = sched_getcpu();
    started = true;
    g_stopper.wait();
  }));
  if (!quiesce::system_wq().queue(*blocker)) return 2;
  if (!wait_until([] { return started.load(); })) return 2;
  static work* behind = keep(new work("behind", [](work&) {}));
  if (!quiesce::system_wq().queue_on(cpu.load(), *behind)) return 2;
  g_checker.check = [] {
    behind->flush();  // returns once the exit hook has dropped it
    return behind->pending() ? 5 : 0;
  };
  return 0;
}

// The same with an inactive item: a queue of max_active 1 whose one active slot an item
// holds (blocked until the last static destructor); an item queued behind it waits inactive
// and must be dropped at exit all the same (the exit rules: inactive items are dropped).
int scenario_inactive_behind_blocked() {
  let_items_block_quietly();
  static std::atomic<bool> started{false};
  static std::atomic<int> cpu{0};
  // Per-CPU: one slot per CPU's domain, so both go to the blocker's CPU.
  static workqueue* wq = keep(new workqueue("one-slot", quiesce::wq_options{.max_active = 1}));
  auto* blocker = keep(new work("blocker", [](work&) {
    cpu = sched_getcpu();
    started = true;
    g_stopper.wait();
  }));
  if (!wq->queue(*blocker)) return 2;
  if (!wait_until([] { return started.load(); })) return 2;
  static std::atomic<bool> ran{false};
  static work* behind = keep(new work("behind", [](work&) { ran = true; }));
  if (!wq->queue_on(cpu.load(), *behind)) return 2;
  if (ran || !behind->pending()) return 2;  // it must wait inactive, or this tests nothing
  g_checker.check = [] {
    behind->flush();  // returns once the exit hook has dropped it
    return behind->pending() || ran ? 5 : 0;
  };
  return 0;
}

// Posted items re-post themselves for ever (from their own function, on several CPUs'
// pools) and others wait behind them: at exit the queued ones are dropped without running
// or being destroyed, running ones finish, and nothing is reported as leaked (their nodes
// stay reachable from the free lists' slabs).
struct repost {
  workqueue* wq;
  std::atomic<int>* runs;
  std::unique_ptr<int> payload;  // move-only: the node owns it
  void operator()() {
    ++*runs;
    wq->post(repost{wq, runs, std::make_unique<int>(*payload + 1)});
  }
};

int scenario_posted_at_exit() {
  static std::atomic<int> runs{0};
  workqueue& wq = quiesce::system_wq();
  for (int i = 0; i < 4; ++i) {
    if (!wq.post(repost{&wq, &runs, std::make_unique<int>(i)})) return 2;
  }
  if (!quiesce::system_unbound_wq().post(
          repost{&quiesce::system_unbound_wq(), &runs, std::make_unique<int>(0)})) {
    return 2;
  }
  g_checker.check = [] {
    bool ran = false;
    if (quiesce::system_wq().post([&ran] { ran = true; })) return 4;  // accepted after the hook
    return ran ? 4 : 0;
  };
  return wait_until([] { return runs.load() >= 1000; }) ? 0 : 2;
}

// Not an exit scenario: a pool's first worker cannot be created (the uid's thread limit,
// RLIMIT_NPROC, is reached), so its item waits; once the limit allows, the watchdog's tick
// creates the worker (after the kernel's one-second cooldown) and the item runs - flush()
// returns. Run as root (it lowers the limit for nobody, uid 65534, and becomes nobody);
// status 4: not root, or nobody cannot be become.
int scenario_worker_created_after_limit() {
  if (::geteuid() != 0) return 4;
  if (!quiesce::test::start_runtime_threads()) return 2;
  workqueue limited("limited",
                    quiesce::wq_options{.unbound = true, .scope = quiesce::affinity_scope::system});
  rlimit was{};
  if (::getrlimit(RLIMIT_NPROC, &was) != 0 || was.rlim_max < 64) return 2;
  // Soft 1: no new thread for nobody; the hard limit kept, so that the soft one may rise.
  // Root that may not become nobody (a user namespace without that uid): status 4.
  const rlimit one{1, was.rlim_max};
  if (::setrlimit(RLIMIT_NPROC, &one) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
      ::setresuid(65534, 65534, 65534) != 0) {
    return 4;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a change of credentials cleared it
  std::atomic<bool> ran{false};
  work item("limited", [&ran](work&) { ran = true; });
  if (!limited.queue(item)) return 2;
  // The queueing tried to create the pool's first worker, and failed: the item waits in a
  // pool without workers (else the scenario tests nothing).
  if (!quiesce::test::item_waits_in_a_pool_without_workers() || ran) return 2;
  if (::setrlimit(RLIMIT_NPROC, &was) != 0) return 2;
  item.flush();  // the retry's worker runs it (without a retry: for ever)
  return ran ? 0 : 5;
}

// Not an exit scenario: a process-directed signal is handled on an application thread,
// never on one of the runtime's (src/base/signal_mask.hpp). Main starts the runtime's
// threads - workers of every per-CPU pool of both priorities and of the unbound pool, the
// timer, the watchdog, RCU's callback thread - then blocks SIGUSR1 itself; one application
// thread leaves it deliverable. Each of 100 signals must be handled on that thread (status
// 5 names the first that was not).
int scenario_signals_go_to_application_threads() {
  static std::atomic<pid_t> handled_on{0};
  struct sigaction sa {};
  sa.sa_handler = [](int) { handled_on.store(::gettid()); };
  ::sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGUSR1, &sa, nullptr) != 0) return 2;
  // An application thread that blocks SIGPROF starts them: they must not inherit that.
  sigset_t prof;
  ::sigemptyset(&prof);
  ::sigaddset(&prof, SIGPROF);
  if (::pthread_sigmask(SIG_BLOCK, &prof, nullptr) != 0) return 2;
  for (int cpu : quiesce::system_topology().cpus()) {
    for (workqueue* wq : {&quiesce::system_wq(), &quiesce::system_highpri_wq()}) {
      work item("start", [](work&) {});
      if (!wq->queue_on(cpu, item)) return 2;
      item.flush();
    }
  }
  work unbound("start", [](work&) {});
  if (!quiesce::system_unbound_wq().queue(unbound)) return 2;
  unbound.flush();
  delayed_work timed("start", [](delayed_work&) {});
  if (!quiesce::system_wq().queue_delayed(timed, std::chrono::milliseconds(1))) return 2;
  timed.flush();
  std::atomic<bool> called{false};
  quiesce::rcu_call(quiesce::rcu_default_domain(), [&called] { called = true; });
  quiesce::rcu_barrier();
  if (!called) return 2;
  // Every runtime thread's mask: SIGINT and SIGUSR1 blocked, SIGSEGV and SIGPROF not.
  int runtime_threads = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    std::string line, name;
    unsigned long long blocked = 0;
    while (std::getline(status, line)) {
      if (line.rfind("Name:\t", 0) == 0) name = line.substr(6);
      if (line.rfind("SigBlk:\t", 0) == 0) blocked = std::stoull(line.substr(8), nullptr, 16);
    }
    const bool runtime = name.rfind("kworker", 0) == 0 || name.rfind("quiesce-", 0) == 0 ||
                         (name.size() > 3 && name.compare(name.size() - 3, 3, "_cb") == 0);
    if (!runtime) continue;
    ++runtime_threads;
    const auto is_blocked = [blocked](int sig) { return (blocked >> (sig - 1)) & 1; };
    if (!is_blocked(SIGINT) || !is_blocked(SIGUSR1) || is_blocked(SIGSEGV) || is_blocked(SIGPROF)) {
      std::fprintf(stderr, "runtime thread '%s' has the mask %llx\n", name.c_str(), blocked);
      return 5;
    }
  }
  if (runtime_threads < 4) return 2;  // workers, the timer, the watchdog, RCU's: not found?
  if (::pthread_sigmask(SIG_UNBLOCK, &prof, nullptr) != 0) return 2;
  sigset_t usr1;
  ::sigemptyset(&usr1);
  ::sigaddset(&usr1, SIGUSR1);
  if (::pthread_sigmask(SIG_BLOCK, &usr1, nullptr) != 0) return 2;
  std::atomic<pid_t> app{0};
  std::atomic<bool> stop{false};
  std::thread application([&] {
    ::pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
    app = ::gettid();
    while (!stop)
      ::usleep(1000);
  });
  int status = wait_until([&] { return app.load() != 0; }) ? 0 : 2;
  for (int i = 0; i < 100 && status == 0; ++i) {
    handled_on = 0;
    ::kill(::getpid(), SIGUSR1);
    if (!wait_until([] { return handled_on.load() != 0; })) {
      status = 5;
    } else if (handled_on.load() != app.load()) {
      std::fprintf(stderr, "signal %d handled on thread %d, not the application's %d\n", i,
                   static_cast<int>(handled_on.load()), static_cast<int>(app.load()));
      status = 5;
    }
  }
  stop = true;
  application.join();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Dies with the test that started it: a scenario that hangs (on a mutant) must not
  // outlive a test program that gave up on it or was killed.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const std::map<std::string, std::function<int()>> scenarios = {
      {"requeue_system_wq", scenario_requeue_system_wq},
      {"requeue_system_unbound_wq", scenario_requeue_system_unbound_wq},
      {"requeue_heap_wq", scenario_requeue_heap_wq},
      {"requeue_static_wq", scenario_requeue_static_wq},
      {"flush_at_exit", scenario_flush_at_exit},
      {"delayed_system", scenario_delayed_system},
      {"delayed_own", scenario_delayed_own},
      {"rearm_mod_delayed", scenario_rearm_mod_delayed},
      {"throw_at_exit", scenario_throw_at_exit},
      {"arm_at_exit", scenario_arm_at_exit},
      {"refused_after_exit", scenario_refused_after_exit},
      {"static_queue_running_item", scenario_static_queue_running_item},
      {"dropped_behind_blocked", scenario_dropped_behind_blocked},
      {"posted_at_exit", scenario_posted_at_exit},
      {"inactive_behind_blocked", scenario_inactive_behind_blocked},
      {"worker_created_after_limit", scenario_worker_created_after_limit},
      {"signals_go_to_application_threads", scenario_signals_go_to_application_threads},
  };
  if (argc != 2 || !scenarios.count(argv[1])) {
    std::fprintf(stderr, "usage: wq_exit_child SCENARIO\n");
    return 3;
  }
  const int status = scenarios.at(argv[1])();
  if (status != 0) {
    std::fprintf(stderr, "wq_exit_child: scenario %s could not be set up\n", argv[1]);
    return status;
  }
  main_returning = true;
  return 0;
}
