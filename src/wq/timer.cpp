// The one timer facility of the process: a thread that queues delayed work when it is due.
#include <condition_variable>
#include <map>
#include <mutex>

#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::detail {

namespace {

class timer {
 public:
  ~timer() {
    {
      std::lock_guard guard(lock_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void arm(work& item, workqueue& wq, int cpu, std::uint64_t deadline) {
    std::lock_guard guard(lock_);
    if (!thread_.joinable()) thread_ = named_thread("quiesce-timer", [this] { run(); });
    wq_access::timer_seq(item) = ++last_seq_;
    wq_access::timer_deadline(item) = deadline;
    wq_access::timer_wq(item) = &wq;
    wq_access::timer_cpu(item) = cpu;
    const auto it = armed_.emplace(key_of(item), &item).first;
    if (it == armed_.begin()) cv_.notify_one();  // a new earliest deadline
  }

  bool cancel(work& item, workqueue** wq, int* cpu) {
    std::lock_guard guard(lock_);
    if (wq_access::timer_seq(item) == 0) return false;
    armed_.erase(key_of(item));
    wq_access::timer_seq(item) = 0;
    *wq = wq_access::timer_wq(item);
    *cpu = wq_access::timer_cpu(item);
    return true;
  }

 private:
  using key = std::pair<std::uint64_t, std::uint64_t>;  // deadline, arming sequence
  static key key_of(work& item) {
    return {wq_access::timer_deadline(item), wq_access::timer_seq(item)};
  }

  void run() {
    std::unique_lock guard(lock_);
    while (!stopping_) {
      if (armed_.empty()) {
        cv_.wait(guard);
        continue;
      }
      const auto first = armed_.begin();
      const std::uint64_t now = now_ns();
      if (first->first.first > now) {
        cv_.wait_for(guard, std::chrono::nanoseconds(first->first.first - now));
        continue;  // re-check: spurious wake, an earlier item, or stop
      }
      work& item = *first->second;
      armed_.erase(first);
      wq_access::timer_seq(item) = 0;
      workqueue& wq = *wq_access::timer_wq(item);
      const int cpu = wq_access::timer_cpu(item);
      guard.unlock();
      wq_impl& impl = wq_access::impl(wq);
      queue_work_owned(impl, cpu, item, /*from_timer=*/true);
      impl.timers_armed.fetch_sub(1, std::memory_order_seq_cst);
      notify_completion();
      guard.lock();
    }
  }

  std::mutex lock_;
  std::condition_variable cv_;
  std::map<key, work*> armed_;  // L: ordered by deadline
  std::uint64_t last_seq_ = 0;  // L
  bool stopping_ = false;       // L
  named_thread thread_;         // L: started on first arm
};

timer& the_timer() {
  static timer t;
  return t;
}

}  // namespace

void timer_arm(work& item, workqueue& wq, int cpu, std::uint64_t deadline_ns) {
  the_timer().arm(item, wq, cpu, deadline_ns);
}

bool timer_cancel(work& item, workqueue** wq, int* cpu) {
  return the_timer().cancel(item, wq, cpu);
}

}  // namespace quiesce::detail
