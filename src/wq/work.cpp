// Work items: naming, and the operations on one item (pending, flush, cancel).
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "completion.hpp"
#include "internal.hpp"
#include "quiesce/log.hpp"
#include "quiesce/trace.hpp"

namespace quiesce {

namespace detail {

namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && out ? out : mangled;
  std::free(out);  // allocated by the demangler with malloc
  return name;
}

// The kernel prints work functions with %ps: the symbol name. For a plain function we find
// its symbol (exported functions; others need -rdynamic); otherwise we name the callable's
// type, which for a lambda says where it was written.
std::string callable_name(const std::function<void(work&)>& fn) {
  using fn_ptr = void (*)(work&);
  if (const fn_ptr* fp = fn.target<fn_ptr>()) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(*fp), &info) != 0 && info.dli_sname) {
      std::string name = demangle(info.dli_sname);
      if (const auto paren = name.find('('); paren != std::string::npos) name.resize(paren);
      return name;
    }
  }
  return demangle(fn.target_type().name());
}

}  // namespace

bool grab_pending(work& item, bool count_cancel) {
  using A = wq_access;
  // Counted before the instance accounting is undone: after that the queue may be gone.
  auto counted = [count_cancel](wq_impl& wq) {
    if (count_cancel) wq.cancelled.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  for (;;) {
    const std::uint32_t old = A::flags(item).fetch_or(work_pending, std::memory_order_seq_cst);
    if (!(old & work_pending)) return false;
    if (old & work_canceling) {
      // Another cancel_sync holds the bit while it waits; wait for it to let go.
      wait_for_completion(
          [&] { return !(A::flags(item).load(std::memory_order_seq_cst) & work_canceling); });
      continue;
    }
    workqueue* timer_wq = nullptr;
    int cpu = -1;
    if (timer_cancel(item, &timer_wq, &cpu)) {
      wq_impl& wq = A::impl(*timer_wq);
      counted(wq);
      wq.timers_armed.fetch_sub(1, std::memory_order_seq_cst);
      notify_completion();
      return true;
    }
    if (pool* p = A::queued_pool(item).load(std::memory_order_seq_cst)) {
      std::unique_lock guard(p->lock);
      if (A::queued_pool(item).load(std::memory_order_seq_cst) == p) {
        static_cast<work_list*>(A::on_list(item))->erase(&item);
        A::on_list(item) = nullptr;
        A::queued_pool(item).store(nullptr, std::memory_order_seq_cst);
        pwq* q = A::pwq_of(item);
        const int color = A::color(item);
        const bool active = A::active(item);
        counted(*q->wq);
        if (q->domain->shares_pool_lock) {
          pwq_dec_nr_in_flight_locked(*q, color, active);
        } else {
          guard.unlock();
          pwq_dec_nr_in_flight(*q, color, active);
        }
        return true;
      }
    }
    if (active_domain* d = A::inactive_in(item).load(std::memory_order_seq_cst)) {
      std::unique_lock guard(d->lock);
      if (A::inactive_in(item).load(std::memory_order_seq_cst) == d) {
        d->inactive.erase(&item);
        A::inactive_in(item).store(nullptr, std::memory_order_seq_cst);
        pwq* q = A::pwq_of(item);
        const int color = A::color(item);
        counted(*q->wq);
        guard.unlock();
        pwq_dec_nr_in_flight(*q, color, /*active=*/false);
        return true;
      }
    }
    // Pending but on no list: in transit between a timer, a queuer and a list. It lands
    // within a few instructions; let the thread moving it run.
    std::this_thread::yield();
  }
}

}  // namespace detail

using detail::wq_access;

work::work(std::function<void(work&)> fn)
    : fn_(std::move(fn)),
      name_(fn_ ? detail::callable_name(fn_) : std::string()),
      trace_name_(trace::intern(name_)) {
  if (!fn_) throw std::invalid_argument("fn: a work item needs a function");
}

work::work(std::string name, std::function<void(work&)> fn)
    : fn_(std::move(fn)), name_(std::move(name)), trace_name_(trace::intern(name_)) {
  if (!fn_) throw std::invalid_argument("fn: a work item needs a function");
}

work::~work() {
  const bool pending = flags_.load(std::memory_order_seq_cst) & detail::work_pending;
  const bool running = running_id_.load(std::memory_order_seq_cst) != 0;
  if (pending || running) {
    log(log_level::err,
        fmt::format("BUG: work {} destroyed while {}", name_, pending ? "pending" : "running"));
    std::abort();
  }
}

bool work::pending() const noexcept {
  return flags_.load(std::memory_order_seq_cst) & detail::work_pending;
}

bool work::flush() {
  if (current_work() == this) {
    throw std::logic_error("work::flush: " + name_ + " would wait for itself");
  }
  // A delayed item still on its timer is queued now, as the kernel's flush_delayed_work.
  workqueue* wq = nullptr;
  int cpu = -1;
  const bool was_armed = detail::timer_cancel(*this, &wq, &cpu);
  if (was_armed) {
    detail::wq_impl& impl = wq_access::impl(*wq);
    detail::queue_work_owned(impl, cpu, *this, /*from_timer=*/true);
    impl.timers_armed.fetch_sub(1, std::memory_order_seq_cst);
    detail::notify_completion();
  }
  const std::uint64_t target = last_id_.load(std::memory_order_seq_cst);
  auto done = [&] {
    const std::uint64_t p = pending_id_.load(std::memory_order_seq_cst);
    if (p != 0 && p <= target) return false;
    const std::uint64_t r = running_id_.load(std::memory_order_seq_cst);
    return r == 0 || r > target;
  };
  if (target == 0 || done()) return was_armed;
  detail::wait_for_completion(done);
  return true;
}

bool work::cancel() {
  const bool was_pending = detail::grab_pending(*this, /*count_cancel=*/true);
  if (was_pending) pending_id_.store(0, std::memory_order_seq_cst);
  flags_.fetch_and(~detail::work_pending, std::memory_order_seq_cst);
  detail::notify_completion();
  return was_pending;
}

bool work::cancel_sync() {
  if (current_work() == this) {
    throw std::logic_error("work::cancel_sync: " + name_ + " would wait for itself");
  }
  const bool was_pending = detail::grab_pending(*this, /*count_cancel=*/true);
  // Holding the pending bit keeps the item from being queued while we wait.
  flags_.fetch_or(detail::work_canceling, std::memory_order_seq_cst);
  if (was_pending) pending_id_.store(0, std::memory_order_seq_cst);
  detail::wait_for_completion([&] { return running_id_.load(std::memory_order_seq_cst) == 0; });
  flags_.fetch_and(~(detail::work_pending | detail::work_canceling), std::memory_order_seq_cst);
  detail::notify_completion();
  return was_pending;
}

}  // namespace quiesce
