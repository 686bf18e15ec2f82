// SPDX-License-Identifier: Apache-2.0
// A QSBR reader loop (liburcu's "qsbr" flavour): readers mark no critical sections at all;
// each reports a quiescent state between uses - a point where it holds no reference - and
// goes offline around anything that blocks. A grace period waits until every online
// reader has reported once.
#include <quiesce/rcu.hpp>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

struct route {
  int dest;
  int hop;  // always dest + 1
};

std::atomic<route*> table{nullptr};

int main() {
  quiesce::rcu_domain& qsbr = quiesce::rcu_qsbr_domain();
  table.store(new route{1, 2});
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, lookups{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      quiesce::rcu_thread_online(qsbr);  // from here, grace periods wait for this thread
      while (!stop.load(std::memory_order_relaxed)) {
        const route* r = table.load(std::memory_order_acquire);
        if (r->hop != r->dest + 1) bad.fetch_add(1);
        lookups.fetch_add(1, std::memory_order_relaxed);
        quiesce::rcu_quiescent_state(qsbr);  // r is not used past this point
      }
      quiesce::rcu_thread_offline(qsbr);  // before blocking or exiting
    });
  }
  for (int n = 2; n <= 2000; ++n) {
    route* old = table.exchange(new route{n, n + 1}, std::memory_order_acq_rel);
    quiesce::rcu_synchronize(qsbr);  // every reader has passed a quiescent state since
    old->hop = -1;                   // poison, then free: no reader can hold it
    delete old;
  }
  stop = true;
  for (auto& t : readers)
    t.join();
  delete table.exchange(nullptr);
  const bool ok = bad.load() == 0;
  std::printf("qsbr_reader: %ld lookups, %ld bad: %s\n", lookups.load(), bad.load(),
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
