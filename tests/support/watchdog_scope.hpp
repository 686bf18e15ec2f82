// SPDX-License-Identifier: Apache-2.0
// Test helper: sets a watchdog configuration for a scope and restores the previous one,
// also when an ASSERT leaves the test early.
#pragma once

#include "quiesce/watchdog.hpp"

namespace quiesce::test {

class scoped_watchdog_config {
 public:
  explicit scoped_watchdog_config(const watchdog_config& c) : saved_(get_watchdog_config()) {
    set_watchdog_config(c);
  }
  ~scoped_watchdog_config() { set_watchdog_config(saved_); }
  scoped_watchdog_config(const scoped_watchdog_config&) = delete;
  scoped_watchdog_config& operator=(const scoped_watchdog_config&) = delete;

 private:
  watchdog_config saved_;
};

}  // namespace quiesce::test
