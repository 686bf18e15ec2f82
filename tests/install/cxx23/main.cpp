// SPDX-License-Identifier: Apache-2.0
// A C++23 workqueue + RCU user built with `pkg-config --cflags --libs quiesce` alone: the
// flags keep its -std (no -std=c++20 forced on it) and need no libcrypto. Exits 0 only if
// an item ran (a plain lambda, a std::move_only_function item and a posted one) and a grace
// period passed.
#include <quiesce/rcu.hpp>
#include <quiesce/workqueue.hpp>

#include <atomic>
#include <functional>
#include <memory>

static_assert(__cplusplus > 202002L, "pkg-config's flags lowered the consumer's C++ standard");

int main() {
  std::atomic<int> ran{0};
  quiesce::work w([&](quiesce::work&) { ran.fetch_add(1); });
  // C++23's std::move_only_function is a work item's function too.
  quiesce::work m(std::move_only_function<void(quiesce::work&)>(
      [&ran, p = std::make_unique<int>(10)](quiesce::work&) { ran.fetch_add(*p); }));
  {
    quiesce::workqueue wq("cxx23", {.unbound = true});
    wq.queue(w);
    wq.queue(m);
    wq.post(std::move_only_function<void()>(
        [&ran, p = std::make_unique<int>(100)] { ran.fetch_add(*p); }));
    wq.flush();
  }
  quiesce::rcu_synchronize(quiesce::rcu_default_domain());
  return ran.load() == 111 ? 0 : 1;
}
