// SPDX-License-Identifier: Apache-2.0
// progress_line (progress.hpp).
#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "quiesce/clock.hpp"

namespace quiesce::cli {

namespace {

std::string duration_text(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  if (s < 90) return fmt::format("{} s", s);
  return fmt::format("{} min {:02} s", s / 60, s % 60);
}

}  // namespace

bool progress_wanted(bool json) {
  return !json && ::isatty(STDERR_FILENO) == 1;
}

progress_line::progress_line(std::string what, std::size_t steps, bool enabled)
    : what_(std::move(what)), steps_(steps), begin_ns_(now_ns()), enabled_(enabled) {}

progress_line::~progress_line() {
  if (enabled_ && started_ > 0) fmt::print(stderr, "\r\033[K");
  std::fflush(stderr);
}

std::string progress_line::line() const {
  const std::size_t done = started_ == 0 ? 0 : started_ - 1;
  const unsigned pct = steps_ == 0 ? 100 : static_cast<unsigned>(done * 100 / steps_);
  std::string s = fmt::format("{}: {} ({}/{}) {}%", what_, phase_, started_, steps_, pct);
  if (done > 0 && steps_ > done) {
    const double per_step = static_cast<double>(step_begin_ns_ - begin_ns_) / 1e9 / done;
    s += fmt::format(" ~{} left", duration_text(per_step * static_cast<double>(steps_ - done)));
  }
  return s;
}

void progress_line::step(std::string_view phase) {
  ++started_;
  phase_ = phase;
  step_begin_ns_ = now_ns();
  if (!enabled_) return;
  fmt::print(stderr, "\r\033[K{}", line());
  std::fflush(stderr);
}

}  // namespace quiesce::cli
