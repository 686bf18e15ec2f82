// SPDX-License-Identifier: Apache-2.0
// Periodic work: an item that re-arms itself with mod_delayed() each time it runs, and is
// torn down with one cancel_sync() - the kernel's "self-rearming delayed work" pattern
// (e.g. a statistics flush every interval).
//
// cancel_sync() returns only once the item is idle: not pending, not armed, not running -
// and while it waits, the item's own re-arming is refused, so it cannot slip away.
#include <quiesce/workqueue.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace std::chrono_literals;

int main() {
  quiesce::workqueue wq("stats_flush", {});
  std::atomic<int> ticks{0};
  quiesce::delayed_work tick("stats_tick", [&](quiesce::delayed_work& self) {
    ticks.fetch_add(1);
    // Re-arm: the next tick in 5 ms. (Refused while cancel_sync() waits.)
    wq.mod_delayed(self, 5ms);
  });

  wq.queue_delayed(tick, 5ms);
  while (ticks.load() < 5)
    std::this_thread::sleep_for(1ms);

  tick.cancel_sync();  // idle from here on: no tick runs after this line
  const int at_cancel = ticks.load();
  std::this_thread::sleep_for(50ms);  // ten periods: a surviving timer would have fired
  const bool ok = ticks.load() == at_cancel;
  std::printf("periodic_work: %d ticks, none after cancel_sync: %s\n", at_cancel,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
