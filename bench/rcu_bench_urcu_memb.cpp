// SPDX-License-Identifier: Apache-2.0
// liburcu's memb flavor, fast paths inlined (_LGPL_SOURCE), for bench_rcu.
#define _LGPL_SOURCE
#include <benchmark/benchmark.h>
#include <urcu/urcu-memb.h>

#include <cstdlib>

#include "rcu_bench_common.hpp"

namespace {

void urcu_memb_read_lock_unlock(benchmark::State& state) {
  urcu_memb_register_thread();
  for (auto _ : state) {
    urcu_memb_read_lock();
    benchmark::ClobberMemory();
    urcu_memb_read_unlock();
  }
  urcu_memb_unregister_thread();
}
BENCHMARK(urcu_memb_read_lock_unlock)->Threads(1)->Threads(2);

void urcu_memb_synchronize(benchmark::State& state) {
  urcu_memb_register_thread();
  rcu_bench::synchronize_latency(
      state, [] { urcu_memb_synchronize_rcu(); },
      [](std::atomic<bool>& stop) {
        urcu_memb_register_thread();
        while (!stop.load(std::memory_order_relaxed)) {
          urcu_memb_read_lock();
          benchmark::ClobberMemory();
          urcu_memb_read_unlock();
        }
        urcu_memb_unregister_thread();
      });
  urcu_memb_unregister_thread();
}
BENCHMARK(urcu_memb_synchronize)->Arg(0)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

struct node {
  rcu_head head;
  int payload;
};

void free_node(rcu_head* h) {
  std::free(caa_container_of(h, node, head));
}

void urcu_memb_call_rcu_until_barrier(benchmark::State& state) {
  urcu_memb_register_thread();
  for (auto _ : state) {
    for (std::int64_t i = 0; i < rcu_bench::retire_items; ++i) {
      auto* n = static_cast<node*>(std::malloc(sizeof(node)));
      urcu_memb_call_rcu(&n->head, free_node);
    }
    urcu_memb_barrier();
  }
  urcu_memb_unregister_thread();
  state.SetItemsProcessed(state.iterations() * rcu_bench::retire_items);
}
BENCHMARK(urcu_memb_call_rcu_until_barrier)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
