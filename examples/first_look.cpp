// SPDX-License-Identifier: Apache-2.0
// The README's first example, whole: a work item on a per-CPU workqueue publishes a new
// configuration that readers read without locks; the old one is deleted after an RCU grace
// period. Exits 0 only if the reader saw the new config and the old one was reclaimed.
#include <quiesce/rcu.hpp>
#include <quiesce/workqueue.hpp>

#include <atomic>
#include <mutex>

struct config : quiesce::rcu_obj_base<config> {
  int timeout_ms;
  explicit config(int t) : timeout_ms(t) {}
};
std::atomic<config*> current{new config(100)};

int main() {
  quiesce::workqueue wq("reload", {.highpri = true});  // per-CPU, high priority
  quiesce::work reload([](quiesce::work&) {
    config* old = current.exchange(new config(250));
    old->retire();  // deleted once no reader can still hold it
  });
  wq.queue(reload);
  reload.flush();  // waits for the item to finish
  int seen;
  {
    std::scoped_lock reader(quiesce::rcu_default_domain());  // no lock taken: RCU
    seen = current.load()->timeout_ms;
  }
  quiesce::rcu_barrier();  // every retire() so far has run its delete
  const bool ok = seen == 250;
  delete current.exchange(nullptr);
  return ok ? 0 : 1;
}
