// SPDX-License-Identifier: Apache-2.0
// A resumable chunked cleanup on system_wq(): instead of one work-item run that walks a
// whole table (seed 000's key collector before the fix, which locked up its CPU's
// workqueue), each run does at most a time budget's worth and re-queues itself, so other
// items of the same pool run in between.
#include <quiesce/budget.hpp>
#include <quiesce/workqueue.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

int main() {
  std::vector<int> table(2'000'000, 1);  // entries to clean (set to 0)
  std::size_t cursor = 0;                // the cleanup's own cursor, kept between runs
  std::atomic<bool> finished{false};

  quiesce::resumable_work cleanup(
      "table_cleanup", quiesce::system_wq(),
      [] { return quiesce::budget::time(200us); },  // each run: about 200 us of work
      [&](quiesce::budget& b) {
        while (cursor < table.size() && b.spend())
          table[cursor++] = 0;
        if (cursor < table.size()) return quiesce::progress::more;  // re-queued
        finished = true;
        return quiesce::progress::done;
      });

  // Another item on the same queue, queued while the cleanup runs: it gets a turn between
  // the cleanup's runs instead of waiting for the whole table.
  std::atomic<bool> other_ran_midway{false};
  quiesce::work other("other_item", [&](quiesce::work&) { other_ran_midway = !finished; });

  cleanup.start();
  while (cleanup.executions() < 2)
    std::this_thread::yield();
  quiesce::system_wq().queue(other);
  while (!finished)
    std::this_thread::sleep_for(1ms);
  cleanup.flush();
  other.flush();

  bool clean = true;
  for (int v : table)
    clean = clean && v == 0;
  const bool ok = clean && cleanup.executions() > 1;
  std::printf("chunked_cleanup: %llu runs, the other item ran %s: %s\n",
              static_cast<unsigned long long>(cleanup.executions()),
              other_ran_midway ? "between them" : "after them", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
