// SPDX-License-Identifier: Apache-2.0
#include "quiesce/log.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "die.hpp"
#include "mutex.hpp"
#include "never_destroyed.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/trace.hpp"

namespace quiesce {

namespace {

void stderr_sink(log_level, std::string_view line) {
  std::string out = dmesg_line(now_ns(), line);
  out += '\n';
  // One write per line so lines from several processes do not interleave mid-line.
  std::string_view rest = out;
  while (!rest.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n <= 0) break;  // stderr closed or full: diagnostics are best-effort
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

struct log_state {
  detail::mutex lock{"log lock"};
  log_sink sink QUIESCE_GUARDED_BY(lock) = stderr_sink;  // the lock is also held while it runs
};

// Never destroyed: runtime threads log until the process ends.
log_state& state() {
  static detail::never_destroyed<log_state> s;
  return s.get();
}

// The sink contract is noexcept: a sink that throws ends the process with a message (a
// line lost silently, or a caller's state left half-changed, would be worse).
void call_sink(const log_sink& sink, log_level level, std::string_view line) noexcept {
  try {
    sink(level, line);
  } catch (const std::exception& e) {
    detail::die("the log sink threw (%s) for: %.*s; log sink threw, terminating", e.what(),
                static_cast<int>(line.size()), line.data());
  } catch (...) {
    detail::die("log sink threw; terminating");
  }
}

}  // namespace

const char* to_string(log_level level) noexcept {
  switch (level) {
    case log_level::err:
      return "err";
    case log_level::warning:
      return "warning";
    case log_level::info:
      return "info";
    case log_level::debug:
      return "debug";
  }
  return "?";
}

namespace {

// A logged line (debug excepted) as a trace instant (the first line; the kernel's
// printk:console), so a lockup, hog or stall report shows on the timeline where it happened. Before
// the log lock: intern() takes the trace's own lock.
void trace_console(log_level level, std::string_view message) noexcept {
  if (!trace::enabled() || level == log_level::debug) return;
  try {
    const std::string_view first = message.substr(0, message.find('\n'));
    trace::emit({.ts_ns = now_ns(),
                 .name = trace::console,
                 .category = "log",
                 .str_key = "msg",
                 .str_val = trace::intern(first),
                 .str2_key = "level",
                 .str2_val = to_string(level)});
  } catch (...) {  // no memory for the copy: the line is still logged, not traced
  }
}

}  // namespace

void log(log_level level, std::string_view message) {
  trace_console(level, message);
  log_state& s = state();
  detail::lock_guard guard(s.lock);
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = message.find('\n', start);
    const std::string_view line = message.substr(start, nl - start);
    if (nl == std::string_view::npos) {
      if (!line.empty() || start == 0) call_sink(s.sink, level, line);
      break;
    }
    call_sink(s.sink, level, line);
    start = nl + 1;
  }
}

log_sink set_log_sink(log_sink sink) {
  log_state& s = state();
  detail::lock_guard guard(s.lock);
  log_sink previous = std::move(s.sink);
  s.sink = sink ? std::move(sink) : log_sink(stderr_sink);
  return previous;
}

std::string dmesg_line(std::uint64_t monotonic_ns, std::string_view line) {
  return fmt::format("[{:5}.{:06}] {}", monotonic_ns / 1'000'000'000u,
                     (monotonic_ns / 1'000u) % 1'000'000u, line);
}

log_capture::log_capture(bool forward) {
  // Swap the sink under the log lock directly: previous_ is then written and read (by the
  // sink below, which only ever runs under that lock) under the same lock. Lock order is
  // always log lock -> lock_.
  log_state& s = state();
  detail::lock_guard guard(s.lock);
  previous_ = std::move(s.sink);
  s.sink = [this, forward](log_level level, std::string_view line) {
    {
      std::lock_guard lines_guard(lock_);
      lines_.emplace_back(line);
    }
    if (forward) previous_(level, line);
  };
}

log_capture::~log_capture() {
  log_state& s = state();
  detail::lock_guard guard(s.lock);
  s.sink = previous_ ? std::move(previous_) : log_sink(stderr_sink);
}

std::vector<std::string> log_capture::lines() const {
  std::lock_guard guard(lock_);
  return lines_;
}

std::size_t log_capture::count(std::string_view needle) const {
  std::lock_guard guard(lock_);
  std::size_t n = 0;
  for (const std::string& line : lines_)
    n += line.find(needle) != std::string::npos;
  return n;
}

void log_capture::clear() {
  std::lock_guard guard(lock_);
  lines_.clear();
}

}  // namespace quiesce
