// SPDX-License-Identifier: Apache-2.0
// How the runtime's modules (workqueue, RCU) plug into the one watchdog thread
// (quiesce/watchdog.hpp): a check that runs at every tick while the watchdog is busy, holds
// that keep it busy while something is in flight, and the counters behind
// get_watchdog_counters(). Internal to the library: users configure the watchdog and read
// its counters; only the runtime adds checks. Not installed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "quiesce/watchdog.hpp"

namespace quiesce::detail {

// A check runs on the watchdog thread at every tick while the watchdog is busy.
using watchdog_check = std::function<void(std::uint64_t now_ns, const watchdog_config& config)>;

// Keeps a check registered; unregisters on destruction (after which the check will not
// run again and is not running).
class watchdog_registration {
 public:
  watchdog_registration() = default;
  explicit watchdog_registration(std::uint64_t id) : id_(id) {}
  watchdog_registration(watchdog_registration&& other) noexcept : id_(other.id_) { other.id_ = 0; }
  watchdog_registration& operator=(watchdog_registration&& other) noexcept;
  ~watchdog_registration();

 private:
  std::uint64_t id_ = 0;
};

// Registers `check`, starting the watchdog thread if needed.
[[nodiscard]] watchdog_registration watchdog_register(std::string name, watchdog_check check);

// Marks something in flight (the watchdog ticks while any is held) / no longer in flight.
// Cheap: one atomic add; a futex wake only when the watchdog had gone to sleep.
void watchdog_hold() noexcept;
void watchdog_release() noexcept;

// The watchdog thread's sleeps while nothing is held (it falls asleep after a second of
// that) and the wake-ups holds sent it: at most one per sleep, whatever rises and falls in
// between. For the tests.
struct watchdog_sleep_stats {
  std::uint64_t sleeps = 0;   // sleeps begun, ever
  std::uint64_t wakeups = 0;  // futex wake-ups sent by watchdog_hold(), ever
  bool asleep = false;        // asleep now (until a hold takes the sleep)
};
watchdog_sleep_stats get_watchdog_sleep_stats() noexcept;

// The counters of watchdog_counters, one per report kind (the same order).
enum class watchdog_counter {
  wq_lockups,
  wq_cpu_hogs,
  wq_hog_reports,
  wq_sleepers,
  rcu_stall_infos,
  rcu_stalls,
  rcu_hung_waiters,
  count_  // the number of counters
};

// One more report of kind `c` (relaxed; read by get_watchdog_counters()).
void watchdog_count(watchdog_counter c) noexcept;

}  // namespace quiesce::detail
