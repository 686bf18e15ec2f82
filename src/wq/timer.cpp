// SPDX-License-Identifier: Apache-2.0
// Delayed work: the one timer of the process, a thread that queues delayed items when they
// are due. Never destroyed (workers may arm it while static destructors run at exit); its
// thread ends with the process.
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "../base/mutex.hpp"
#include "../base/never_destroyed.hpp"
#include "../base/signal_mask.hpp"
#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::detail {

namespace {

class timer {
 public:
  // False if the process is exiting (the exit hook has dropped, or is dropping, what the
  // timer holds): the caller ends the instance.
  bool arm(work& item, wq_impl& wq, int cpu, std::uint64_t deadline) {
    detail::lock_guard guard(lock_);
    if (process_exiting()) return false;
    if (!thread_.joinable()) {
      const async_signals_blocked mask;  // inherited by the thread (signal_mask.hpp)
      thread_ = named_thread("quiesce-timer", [this] { run(); });
    }
    state_of(item).timer_seq = ++last_seq_;
    state_of(item).timer_deadline_ns = deadline;
    state_of(item).timer_wq = &wq;
    state_of(item).timer_cpu = cpu;
    const auto it = armed_.emplace(key_of(item), &item).first;
    if (it == armed_.begin()) cv_.notify_one();  // a new earliest deadline
    return true;
  }

  bool cancel(work& item, wq_impl** wq, int* cpu) {
    detail::lock_guard guard(lock_);
    if (state_of(item).timer_seq == 0) return false;
    armed_.erase(key_of(item));
    state_of(item).timer_seq = 0;
    *wq = state_of(item).timer_wq;
    *cpu = state_of(item).timer_cpu;
    return true;
  }

  // Exit: every armed instance ends without running.
  void drop_all() {
    std::vector<std::pair<work*, wq_impl*>> dropped;
    {
      detail::lock_guard guard(lock_);
      for (auto& [key, item] : armed_) {
        state_of(*item).timer_seq = 0;
        dropped.emplace_back(item, state_of(*item).timer_wq);
      }
      armed_.clear();
    }
    for (auto& [item, wq] : dropped) {
      wq->cancelled.fetch_add(1, std::memory_order_relaxed);
      release_pending(*item);
      end_instance(*wq);
    }
  }

 private:
  using key = std::pair<std::uint64_t, std::uint64_t>;  // deadline, arming sequence
  static key key_of(work& item) {
    return {state_of(item).timer_deadline_ns, state_of(item).timer_seq};
  }

  void run() {
    detail::unique_lock guard(lock_);
    for (;;) {
      if (armed_.empty()) {
        guard.wait(cv_);
        continue;
      }
      const auto first = armed_.begin();
      const std::uint64_t deadline = first->first.first;
      if (deadline == never_ns) {  // nothing will ever be due: sleep until something is armed
        guard.wait(cv_);
        continue;
      }
      if (deadline > now_ns()) {
        const std::chrono::steady_clock::time_point until{
            std::chrono::nanoseconds(static_cast<std::int64_t>(deadline))};
        guard.wait_until(cv_, until);
        continue;  // re-check: spurious wake, an earlier item, or due now
      }
      work& item = *first->second;
      armed_.erase(first);
      state_of(item).timer_seq = 0;
      wq_impl& wq = *state_of(item).timer_wq;
      const int cpu = state_of(item).timer_cpu;
      // The instance moves from the timer to the queue (a draining queue accepts it): the
      // queue's instance count does not change, and after this we do not touch it.
      unlocked(guard, [&] {
        queue_work_owned(wq, cpu, item, /*may_yield=*/mutant::timer_yields_to_backlog);
      });
    }
  }

  detail::mutex lock_{"wq timer lock"};
  std::condition_variable cv_;
  std::map<key, work*> armed_ QUIESCE_GUARDED_BY(lock_);  // L(timer): ordered by deadline
  std::uint64_t last_seq_ QUIESCE_GUARDED_BY(lock_) = 0;  // L(timer)
  named_thread thread_ QUIESCE_GUARDED_BY(lock_);  // L(timer): started on first arm, never joined
};

timer& the_timer() {
  static never_destroyed<timer> t;
  return t.get();
}

}  // namespace

void timer_arm(work& item, wq_impl& wq, int cpu, std::uint64_t deadline_ns) {
  if (the_timer().arm(item, wq, cpu, deadline_ns)) return;
  // Exiting: dropped as the exit hook drops armed items (the flag is set before the hook
  // takes the timer lock, so an item is either in the timer for it or refused here).
  wq.cancelled.fetch_add(1, std::memory_order_relaxed);
  release_pending(item);
  end_instance(wq);
}

bool timer_cancel(work& item, wq_impl** wq, int* cpu) {
  return the_timer().cancel(item, wq, cpu);
}

void timer_drop_all() {
  the_timer().drop_all();
}

}  // namespace quiesce::detail
