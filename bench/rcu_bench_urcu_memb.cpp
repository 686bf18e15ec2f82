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

// A reader thread's loop: read-side sections until `stop`.
void busy_reader(std::atomic<bool>& stop) {
  urcu_memb_register_thread();
  while (!stop.load(std::memory_order_relaxed)) {
    urcu_memb_read_lock();
    benchmark::ClobberMemory();
    urcu_memb_read_unlock();
  }
  urcu_memb_unregister_thread();
}

void urcu_memb_synchronize(benchmark::State& state) {
  urcu_memb_register_thread();
  rcu_bench::synchronize_latency(
      state, [] { urcu_memb_synchronize_rcu(); }, busy_reader);
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

// The flood, through call_rcu (which has no bound on its backlog).
std::atomic<std::int64_t> g_flood_freed{0};
struct flood_node {
  rcu_head head;
  char bytes[64 - sizeof(rcu_head)];
};
static_assert(sizeof(flood_node) == 64);
void free_flood_node(rcu_head* h) {
  std::free(caa_container_of(h, flood_node, head));
  g_flood_freed.fetch_add(1, std::memory_order_relaxed);
}
void urcu_memb_call_rcu_flood(benchmark::State& state) {
  urcu_memb_register_thread();
  rcu_bench::retire_flood(
      state,
      [] {
        auto* n = static_cast<flood_node*>(std::malloc(sizeof(flood_node)));
        urcu_memb_call_rcu(&n->head, free_flood_node);
      },
      busy_reader, [] { urcu_memb_barrier(); }, g_flood_freed);
  urcu_memb_unregister_thread();
}
BENCHMARK(urcu_memb_call_rcu_flood)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
