// SPDX-License-Identifier: Apache-2.0
// A C++23 workqueue + RCU user built with `pkg-config --cflags --libs quiesce` alone: the
// flags keep its -std (no -std=c++20 forced on it) and need no libcrypto. Exits 0 only if
// an item ran and a grace period passed.
#include <quiesce/rcu.hpp>
#include <quiesce/workqueue.hpp>

#include <atomic>

static_assert(__cplusplus > 202002L, "pkg-config's flags lowered the consumer's C++ standard");

int main() {
  std::atomic<int> ran{0};
  quiesce::work w([&](quiesce::work&) { ran.fetch_add(1); });
  {
    quiesce::workqueue wq("cxx23", {.unbound = true});
    wq.queue(w);
    wq.flush();
  }
  quiesce::rcu_synchronize(quiesce::rcu_default_domain());
  return ran.load() == 1 ? 0 : 1;
}
