// SPDX-License-Identifier: Apache-2.0
// quiesce/budget.hpp - chunked work: bound each execution of a long loop, keep its cursor,
// and come back for the rest (seed 000: the key collector in chunks of 64).
//
// A budget is spent one item at a time by the loop it bounds:
//     budget b = budget::items(64);            // or budget::time(100us)
//     while (cursor != end && b.spend()) process(*cursor++);
// A resumable_work runs such a step function on a workqueue and re-queues itself while the
// step returns progress::more, so other items of the pool run in between. An
// adaptive_budget sizes item budgets from the measured cost per item, so that an execution
// lasts about a target time without a tuned chunk size.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "quiesce/workqueue.hpp"

namespace quiesce {

// How much one execution may do. A value type; not thread-safe (one loop spends it).
class budget {
 public:
  // At most `n` items (n >= 1; throws std::invalid_argument otherwise).
  static budget items(std::size_t n);
  // Until `slice` has passed since the budget was made or restarted (slice > 0). The clock
  // is read every 16 items, so a slice may overrun by up to 15 items.
  static budget time(std::chrono::nanoseconds slice);
  // Never exhausted (the monolithic, pre-patch behaviour).
  static budget unlimited() noexcept;

  // Takes one item; false (and nothing taken) once the budget is exhausted.
  bool spend() noexcept;
  bool exhausted() const noexcept { return exhausted_; }
  std::size_t spent() const noexcept { return spent_; }
  // Starts over: items again / the slice from now.
  void restart() noexcept;

 private:
  enum class kind { items, time, unlimited };
  budget(kind k, std::size_t items, std::uint64_t slice_ns) noexcept;
  kind kind_;
  std::size_t limit_;          // items
  std::uint64_t slice_ns_;     // time
  std::uint64_t deadline_ns_;  // time
  std::size_t spent_ = 0;
  bool exhausted_ = false;
};

// Sizes item budgets to hit a target duration per execution, from an exponentially
// weighted average of the measured cost per item (weight 1/4 for the newest sample).
// Not thread-safe: owned by the one loop that uses it.
class adaptive_budget {
 public:
  // Throws std::invalid_argument if target <= 0 or min_items is 0 or > max_items.
  explicit adaptive_budget(std::chrono::nanoseconds target, std::size_t min_items = 1,
                           std::size_t max_items = std::size_t{1} << 20,
                           std::size_t initial_items = 64);
  // An item budget of the current chunk size.
  budget next() const { return budget::items(chunk_); }
  // Feeds back what an execution did: `items` processed in `took`.
  void record(std::size_t items, std::chrono::nanoseconds took) noexcept;
  std::size_t chunk() const noexcept { return chunk_; }
  double ns_per_item() const noexcept { return ns_per_item_; }

 private:
  std::uint64_t target_ns_;
  std::size_t min_items_, max_items_;
  std::size_t chunk_;
  double ns_per_item_ = 0;  // 0 until the first sample
};

// What a resumable step reports.
enum class progress { done, more };

// A work item that runs `step` with a fresh budget each execution and re-queues itself on
// `wq` while the step returns progress::more (chained queueing: allowed while draining).
// The step keeps its own cursor between executions. Start it with wq.queue(item) or
// start(); it counts executions.
class resumable_work : public work {
 public:
  resumable_work(std::string name, workqueue& wq, std::function<budget()> make_budget,
                 std::function<progress(budget&)> step);
  // Queues the first execution (false if already pending).
  bool start() { return wq_.queue(*this); }
  // Executions so far (all threads may read; updated by the executing worker).
  std::uint64_t executions() const noexcept { return executions_.load(std::memory_order_relaxed); }

 private:
  void run_once();
  workqueue& wq_;                             // I
  std::function<budget()> make_budget_;       // I
  std::function<progress(budget&)> step_;     // I
  std::atomic<std::uint64_t> executions_{0};  // A: written by the executing worker
};

}  // namespace quiesce
