// SPDX-License-Identifier: Apache-2.0
// quiesce/log.hpp - the one place quiesce's diagnostics go.
//
// Watchdog reports, stall warnings, worker errors and once-only notices all pass through
// log(). The default sink writes each line to stderr with a dmesg-like prefix
// "[    5.123456] " (CLOCK_MONOTONIC seconds, as the kernel's printk time is since boot).
// A program or a test replaces the sink to capture, count or redirect lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce {

// The kernel's printk levels that quiesce uses.
enum class log_level { err, warning, info, debug };

const char* to_string(log_level level) noexcept;

// A sink receives one complete line (no trailing newline). Calls are serialised: a sink
// never runs on two threads at once, so it needs no lock of its own; it must not call
// log() or set_log_sink() itself (that would deadlock). It must not throw: a sink that
// throws terminates the process with "quiesce: log sink threw". quiesce never calls log()
// with a runtime lock held, so a sink may hand lines to a work item (queue it).
using log_sink = std::function<void(log_level level, std::string_view line)>;

// Emits one line (embedded newlines make it several lines, each delivered separately).
// Thread-safe; blocks while another thread's line is being written.
void log(log_level level, std::string_view message);

// Installs `sink` and returns the previous one. An empty sink restores the default stderr
// sink. Once set_log_sink returns, the previous sink is no longer running and will not be
// called again.
log_sink set_log_sink(log_sink sink);

// The default sink's formatting: "[%5u.%06u] " + line, for a CLOCK_MONOTONIC time in ns.
std::string dmesg_line(std::uint64_t monotonic_ns, std::string_view line);

// Captures every line logged during its lifetime (tests, and programs that report
// diagnostics in their own output). Restores the previous sink on destruction.
// Optionally forwards each line to the previous sink as well. Captures nest: destroy them
// in reverse order of construction (as scopes do).
class log_capture {
 public:
  explicit log_capture(bool forward = false);
  ~log_capture();
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;

  std::vector<std::string> lines() const;
  // Number of captured lines that contain `needle`.
  std::size_t count(std::string_view needle) const;
  void clear();

 private:
  mutable std::mutex lock_;
  std::vector<std::string> lines_;  // L: lock_
  log_sink previous_;               // the log lock (log.cpp): swapped and called under it
};

}  // namespace quiesce
