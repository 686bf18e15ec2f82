// SPDX-License-Identifier: Apache-2.0
// An RCU-protected configuration: many threads read the current config without locks; a
// writer publishes a new one and retires the old, which is deleted only after every reader
// that could still see it has left its read-side critical section.
//
// The reader's whole use of the object sits inside one critical section
// (std::scoped_lock on the domain, as with the C++26 <rcu> API); the writer never frees
// by hand - rcu_obj_base::retire() schedules the delete after a grace period.
#include <quiesce/rcu.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

struct config;
struct config_deleter {  // what retire() runs after the grace period
  void operator()(config* c) const;
};

struct config : quiesce::rcu_obj_base<config, config_deleter> {
  int version = 0;
  int timeout_ms = 0;  // always version * 10: a reader checks it saw one whole object
};

std::atomic<config*> current{nullptr};
std::atomic<int> live{0};  // configs not yet deleted

config* make_config(int version) {
  auto* c = new config;
  c->version = version;
  c->timeout_ms = version * 10;
  live.fetch_add(1);
  return c;
}

void config_deleter::operator()(config* c) const {
  c->version = -1;  // poison: a reader that still used it would see a torn config
  delete c;
  live.fetch_sub(1);
}

int main() {
  current.store(make_config(1));
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0}, reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::scoped_lock section(quiesce::rcu_default_domain());  // read-side section
        const config* c = current.load(std::memory_order_acquire);
        if (c->version <= 0 || c->timeout_ms != c->version * 10) torn.fetch_add(1);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int v = 2; v <= 2000; ++v) {
    config* old = current.exchange(make_config(v), std::memory_order_acq_rel);
    old->retire(config_deleter{});  // deleted after a grace period, on the callback thread
  }
  stop = true;
  for (auto& t : readers)
    t.join();
  config_deleter{}(current.exchange(nullptr));  // no reader is left: delete at once
  quiesce::rcu_barrier();                       // every retired config has been deleted
  const bool ok = torn.load() == 0 && live.load() == 0;
  std::printf("rcu_config: %ld reads, %ld torn, %d configs left: %s\n", reads.load(), torn.load(),
              live.load(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
