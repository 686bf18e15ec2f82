// SPDX-License-Identifier: Apache-2.0
// quiesce/sanitize.hpp - seed 003's page-sanitizing loop, for a thread registered with the
// RCU Tasks domain: a Tasks grace period waits for it unless the loop reports quiescent
// states. (The boot experiment that shows it is in src/experiments, sanitize_boot.hpp.)
//
// The sanitizer owns real memory: `pages` 4 KiB pages, all dirty at first. Sanitizing a
// page clears and verifies it (`passes` times: the cost is memory bandwidth, not a sleep).
// A share of pages fails the first time and is left dirty for a second pass (the seed's
// left_dirty list); a share is poisoned and moved to its own list. A stop request
// (kthread_should_stop) is honoured within one page. After every page the loop applies its
// quiescent-state policy:
//   none      nothing
//   resched   cond_resched(): yields the CPU now and then, reports nothing (the bug)
//   tasks_qs  cond_resched_tasks_qs(): reports a Tasks quiescent state (the fix)
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce::sanitize {

enum class qs_policy { none, resched, tasks_qs };
const char* to_string(qs_policy p) noexcept;
// "none", "resched" or "tasks-qs"; throws std::invalid_argument naming the text.
qs_policy parse_qs_policy(std::string_view text);

inline constexpr std::size_t page_size = 4096;

struct sanitizer_options {
  std::size_t pages = 32768;    // 128 MiB
  unsigned passes = 1;          // clear+verify repetitions per page (the page's cost)
  double fail_share = 0.01;     // pages that fail the first time (left dirty)
  double poison_share = 0.001;  // pages found poisoned
  qs_policy policy = qs_policy::tasks_qs;
  std::uint64_t seed = 1;  // which pages fail / are poisoned
};

struct pass_counts {
  std::size_t sanitized = 0;
  std::size_t left_dirty = 0;
  std::size_t poisoned = 0;
};

struct sanitize_result {
  std::uint64_t duration_ns = 0;
  std::size_t pages_processed = 0;  // page operations done, all passes
  std::vector<pass_counts> passes;  // after each pass: totals over all pages
  bool stopped = false;             // ended by request_stop()
};

class page_sanitizer {
 public:
  // Allocates and dirties the pages. Throws std::invalid_argument naming a bad option
  // (pages 0, passes 0, a share outside [0, 1]) and std::bad_alloc if memory runs out.
  explicit page_sanitizer(const sanitizer_options& options);
  ~page_sanitizer();
  page_sanitizer(const page_sanitizer&) = delete;
  page_sanitizer& operator=(const page_sanitizer&) = delete;

  // Runs the loop on the calling thread: a first pass over the dirty list, then a second
  // over the pages left dirty. Call once.
  sanitize_result run();
  // Asks the loop to stop; it stops within one page. Any thread.
  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  bool running() const noexcept { return running_.load(std::memory_order_acquire); }
  std::size_t pages_done() const noexcept { return done_.load(std::memory_order_relaxed); }

  // The lists now (sizes): dirty, sanitized, poisoned. They always sum to pages.
  pass_counts lists() const noexcept;
  const sanitizer_options& options() const noexcept { return opt_; }

 private:
  enum class outcome { sanitized, left_dirty, poisoned };
  outcome sanitize_page(std::size_t index, bool first_try);

  sanitizer_options opt_;
  std::unique_ptr<unsigned char[]> memory_;
  std::vector<std::size_t> dirty_, sanitized_, poisoned_;                 // W: the running thread
  std::atomic<std::size_t> n_dirty_{0}, n_sanitized_{0}, n_poisoned_{0};  // A: for lists()
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<std::size_t> done_{0};
};

// How many clear+verify passes per page make `pages` pages take about `target` here
// (measured now on a sample).
unsigned calibrate_passes(std::size_t pages, std::chrono::nanoseconds target);

}  // namespace quiesce::sanitize
