// SPDX-License-Identifier: Apache-2.0
#include "quiesce/budget.hpp"

#include <algorithm>
#include <stdexcept>

#include "quiesce/clock.hpp"

namespace quiesce {

budget::budget(kind k, std::size_t items, std::uint64_t slice_ns) noexcept
    : kind_(k), limit_(items), slice_ns_(slice_ns), deadline_ns_(0) {
  restart();
}

budget budget::items(std::size_t n) {
  if (n == 0) throw std::invalid_argument("n: an item budget needs at least one item");
  return budget(kind::items, n, 0);
}

budget budget::time(std::chrono::nanoseconds slice) {
  if (slice <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("slice: a time budget needs a positive slice");
  }
  return budget(kind::time, 0, static_cast<std::uint64_t>(slice.count()));
}

budget budget::unlimited() noexcept {
  return budget(kind::unlimited, 0, 0);
}

void budget::restart() noexcept {
  spent_ = 0;
  exhausted_ = false;
  if (kind_ == kind::time) deadline_ns_ = now_ns() + slice_ns_;
}

bool budget::spend() noexcept {
  if (exhausted_) return false;
  switch (kind_) {
    case kind::items:
      if (spent_ >= limit_) {
        exhausted_ = true;
        return false;
      }
      break;
    case kind::time:
      // The first item always goes (progress is guaranteed); then check every 16th.
      if (spent_ > 0 && spent_ % 16 == 0 && now_ns() >= deadline_ns_) {
        exhausted_ = true;
        return false;
      }
      break;
    case kind::unlimited:
      break;
  }
  ++spent_;
  return true;
}

adaptive_budget::adaptive_budget(std::chrono::nanoseconds target, std::size_t min_items,
                                 std::size_t max_items, std::size_t initial_items)
    : target_ns_(static_cast<std::uint64_t>(target.count())),
      min_items_(min_items),
      max_items_(max_items),
      chunk_(std::clamp(initial_items, min_items, max_items)) {
  if (target <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("target: an adaptive budget needs a positive target");
  }
  if (min_items == 0 || min_items > max_items) {
    throw std::invalid_argument("min_items: must be at least 1 and at most max_items");
  }
}

void adaptive_budget::record(std::size_t items, std::chrono::nanoseconds took) noexcept {
  if (items == 0) return;
  const double sample = static_cast<double>(took.count()) / static_cast<double>(items);
  ns_per_item_ = ns_per_item_ == 0 ? sample : 0.75 * ns_per_item_ + 0.25 * sample;
  if (ns_per_item_ <= 0) {
    chunk_ = max_items_;
    return;
  }
  const double wanted = static_cast<double>(target_ns_) / ns_per_item_;
  chunk_ = std::clamp(static_cast<std::size_t>(wanted), min_items_, max_items_);
}

resumable_work::resumable_work(std::string name, workqueue& wq, std::function<budget()> make_budget,
                               std::function<progress(budget&)> step)
    : work(std::move(name), [this](work&) { run_once(); }),
      wq_(wq),
      make_budget_(std::move(make_budget)),
      step_(std::move(step)) {
  if (!make_budget_ || !step_) {
    throw std::invalid_argument("step: a resumable work item needs a budget maker and a step");
  }
}

void resumable_work::run_once() {
  budget b = make_budget_();
  const progress p = step_(b);
  executions_.fetch_add(1, std::memory_order_relaxed);
  if (p == progress::more) wq_.queue(*this);  // chained: runs again after what is queued
}

}  // namespace quiesce
