// SPDX-License-Identifier: Apache-2.0
#include "quiesce/sanitize.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include "quiesce/clock.hpp"
#include "quiesce/rcu.hpp"

namespace quiesce::sanitize {

const char* to_string(qs_policy p) noexcept {
  switch (p) {
    case qs_policy::none:
      return "none";
    case qs_policy::resched:
      return "resched";
    case qs_policy::tasks_qs:
      return "tasks-qs";
  }
  return "?";
}

qs_policy parse_qs_policy(std::string_view text) {
  if (text == "none") return qs_policy::none;
  if (text == "resched") return qs_policy::resched;
  if (text == "tasks-qs" || text == "tasks_qs") return qs_policy::tasks_qs;
  throw std::invalid_argument("qs: '" + std::string(text) +
                              "' is not one of none, resched, tasks-qs");
}

page_sanitizer::page_sanitizer(const sanitizer_options& options) : opt_(options) {
  if (opt_.pages == 0) throw std::invalid_argument("pages: must be at least 1");
  if (opt_.passes == 0) throw std::invalid_argument("passes: must be at least 1");
  if (!(opt_.fail_share >= 0 && opt_.fail_share <= 1)) {
    throw std::invalid_argument(fmt::format("fail_share: {} is outside [0, 1]", opt_.fail_share));
  }
  if (!(opt_.poison_share >= 0 && opt_.poison_share <= 1)) {
    throw std::invalid_argument(
        fmt::format("poison_share: {} is outside [0, 1]", opt_.poison_share));
  }
  memory_ = std::make_unique<unsigned char[]>(opt_.pages * page_size);
  dirty_.reserve(opt_.pages);
  for (std::size_t i = 0; i < opt_.pages; ++i) {
    std::memset(&memory_[i * page_size], 0xa5, page_size);  // "dirty": old enclave data
    dirty_.push_back(i);
  }
  n_dirty_ = opt_.pages;
}

page_sanitizer::~page_sanitizer() = default;

pass_counts page_sanitizer::lists() const noexcept {
  return {n_sanitized_.load(), n_dirty_.load(), n_poisoned_.load()};
}

page_sanitizer::outcome page_sanitizer::sanitize_page(std::size_t index, bool first_try) {
  // Which pages fail or are poisoned: a hash of the index and the seed (reproducible).
  std::uint64_t h = (index + 1) * 0x9e3779b97f4a7c15ull ^ opt_.seed;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const double u = static_cast<double>(h % 1'000'000) / 1'000'000.0;
  if (u < opt_.poison_share) return outcome::poisoned;
  unsigned char* page = &memory_[index * page_size];
  for (unsigned pass = 0; pass < opt_.passes; ++pass) {
    // Clear (with a pattern, then zero) and verify: EREMOVE's cost, in memory bandwidth.
    const auto pattern = static_cast<unsigned char>(index + pass);
    std::memset(page, pattern, page_size);
    for (std::size_t i = 0; i < page_size; i += 64) {
      if (page[i] != pattern) return outcome::left_dirty;
    }
    std::memset(page, 0, page_size);
    for (std::size_t i = 0; i < page_size; i += 64) {
      if (page[i] != 0) return outcome::left_dirty;
    }
  }
  if (first_try && u < opt_.poison_share + opt_.fail_share) return outcome::left_dirty;
  return outcome::sanitized;
}

sanitize_result page_sanitizer::run() {
  sanitize_result r;
  running_.store(true, std::memory_order_release);
  const std::uint64_t start = now_ns();
  for (int pass = 0; pass < 2 && !dirty_.empty(); ++pass) {
    std::vector<std::size_t> todo;
    todo.swap(dirty_);
    std::size_t i = 0;
    for (; i < todo.size(); ++i) {
      if (stop_.load(std::memory_order_relaxed)) break;  // kthread_should_stop()
      const std::size_t page = todo[i];
      switch (sanitize_page(page, pass == 0)) {
        case outcome::sanitized:
          sanitized_.push_back(page);
          ++n_sanitized_;
          --n_dirty_;
          break;
        case outcome::poisoned:
          poisoned_.push_back(page);
          ++n_poisoned_;
          --n_dirty_;
          break;
        case outcome::left_dirty:
          dirty_.push_back(page);  // stays counted dirty
          break;
      }
      ++r.pages_processed;
      done_.fetch_add(1, std::memory_order_relaxed);
      switch (opt_.policy) {
        case qs_policy::none:
          break;
        case qs_policy::resched:
          cond_resched();
          break;
        case qs_policy::tasks_qs:
          cond_resched_tasks_qs();
          break;
      }
    }
    // Pages not reached (stop requested) stay on the dirty list.
    dirty_.insert(dirty_.end(), todo.begin() + static_cast<std::ptrdiff_t>(i), todo.end());
    r.passes.push_back(lists());
    if (stop_.load(std::memory_order_relaxed)) {
      r.stopped = true;
      break;
    }
  }
  r.duration_ns = now_ns() - start;
  running_.store(false, std::memory_order_release);
  return r;
}

unsigned calibrate_passes(std::size_t pages, std::chrono::nanoseconds target) {
  sanitizer_options o;
  o.pages = 2048;
  o.passes = 4;
  o.fail_share = 0;
  o.poison_share = 0;
  o.policy = qs_policy::none;
  page_sanitizer sample(o);
  const sanitize_result r = sample.run();
  const double per_pass_page = static_cast<double>(r.duration_ns) / (2048.0 * 4);
  const double passes = static_cast<double>(target.count()) / (per_pass_page * pages);
  return static_cast<unsigned>(std::clamp(passes, 1.0, 100000.0));
}

}  // namespace quiesce::sanitize
