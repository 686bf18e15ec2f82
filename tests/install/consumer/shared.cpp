// SPDX-License-Identifier: Apache-2.0
// A workqueue + RCU user linked against libquiesce.so.0 (quiesce::quiesce_shared): posts a
// move-only lambda, takes a result through submit(), waits for a grace period. Exits 0 only
// if all of it happened.
#include <quiesce/rcu.hpp>
#include <quiesce/workqueue.hpp>

#include <atomic>
#include <memory>

int main() {
  std::atomic<int> ran{0};
  int answer = 0;
  {
    quiesce::workqueue wq("shared", {.unbound = true});
    wq.post([&ran, p = std::make_unique<int>(1)] { ran.fetch_add(*p); });
    answer = wq.submit([] { return 42; }).get();
  }  // drains
  quiesce::rcu_synchronize(quiesce::rcu_default_domain());
  return ran.load() == 1 && answer == 42 ? 0 : 1;
}
