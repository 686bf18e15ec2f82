// SPDX-License-Identifier: Apache-2.0
// A /proc/sys setting changed for the duration of a run, restored on every way out: the
// destructor (normal return, exceptions), and SIGINT, SIGTERM, SIGHUP and SIGQUIT, whose
// handler writes the old value back and then dies of the signal as it would have
// (exit_cleanup.hpp).
#pragma once

#include <optional>
#include <string>

#include "quiesce/host/exit_cleanup.hpp"

namespace quiesce::host {

class sysctl_override {
 public:
  // Reads the current value of `path` (e.g. /proc/sys/kernel/keys/gc_delay), installs the
  // signal handlers, then writes `value`. Throws std::runtime_error naming the path and
  // the reason (not root, no such setting, value refused) and changes nothing. One override
  // may be active at a time in a process (std::logic_error otherwise).
  sysctl_override(std::string path, const std::string& value);
  // Writes the old value back and restores the previous signal dispositions.
  ~sysctl_override();
  sysctl_override(const sysctl_override&) = delete;
  sysctl_override& operator=(const sysctl_override&) = delete;

  const std::string& old_value() const noexcept { return old_; }

 private:
  std::string path_, old_;
  std::optional<exit_cleanup> restore_;
};

// The value of a /proc/sys setting, trailing newline removed. Throws std::runtime_error.
std::string read_sysctl(const std::string& path);

}  // namespace quiesce::host
