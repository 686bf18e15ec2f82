// SPDX-License-Identifier: Apache-2.0
// RCU against liburcu (Debian's liburcu-dev: memb and qsbr flavors, fast paths inlined with
// _LGPL_SOURCE), side by side in one binary:
//   read-side lock+unlock (1 and 2 reader threads); QSBR quiescent state;
//   rcu_synchronize latency p50/p99 with 0 and 2 busy readers;
//   retire throughput: 1,000,000 retires (call_rcu), until rcu_barrier returns (default
//   and QSBR domains; the QSBR retirer online, as a registered liburcu thread is);
//   a retire flood: up to 10 M objects/s for QUIESCE_FLOOD_SECONDS (10) beside a reader,
//   peak unreclaimed objects and resident growth (rcu_bench_common.hpp).
// Repeat with --benchmark_repetitions=N; `quiesce bench peers` runs it and prints ratios.
// Peers live in rcu_bench_urcu_memb.cpp / rcu_bench_urcu_qsbr.cpp (their headers clash).
// Run: build/release/bin/bench_rcu   (./quiesce bench runs it too)
#include <benchmark/benchmark.h>

#include "quiesce/rcu.hpp"
#include "rcu_bench_common.hpp"

namespace {

using quiesce::rcu_default_domain;
using quiesce::rcu_qsbr_domain;

void quiesce_read_lock_unlock(benchmark::State& state) {
  quiesce::rcu_domain& d = rcu_default_domain();
  for (auto _ : state) {
    d.lock();
    benchmark::ClobberMemory();
    d.unlock();
  }
}
BENCHMARK(quiesce_read_lock_unlock)->Threads(1)->Threads(2);

void quiesce_qsbr_read_lock_unlock(benchmark::State& state) {
  quiesce::rcu_domain& d = rcu_qsbr_domain();
  quiesce::rcu_thread_online(d);
  for (auto _ : state) {
    d.lock();
    benchmark::ClobberMemory();
    d.unlock();
  }
  quiesce::rcu_thread_offline(d);
}
BENCHMARK(quiesce_qsbr_read_lock_unlock)->Threads(1)->Threads(2);

void quiesce_qsbr_quiescent_state(benchmark::State& state) {
  quiesce::rcu_domain& d = rcu_qsbr_domain();
  quiesce::rcu_thread_online(d);
  for (auto _ : state) {
    quiesce::rcu_quiescent_state(d);
    benchmark::ClobberMemory();
  }
  quiesce::rcu_thread_offline(d);
}
BENCHMARK(quiesce_qsbr_quiescent_state)->Threads(1)->Threads(2);

// A reader thread's loop: default-domain read-side sections until `stop`.
void busy_reader(std::atomic<bool>& stop) {
  quiesce::rcu_domain& d = rcu_default_domain();
  while (!stop.load(std::memory_order_relaxed)) {
    d.lock();
    benchmark::ClobberMemory();
    d.unlock();
  }
}

void quiesce_synchronize(benchmark::State& state) {
  rcu_bench::synchronize_latency(
      state, [] { quiesce::rcu_synchronize(rcu_default_domain()); }, busy_reader);
}
BENCHMARK(quiesce_synchronize)->Arg(0)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

void quiesce_qsbr_synchronize(benchmark::State& state) {
  rcu_bench::synchronize_latency(
      state, [] { quiesce::rcu_synchronize(rcu_qsbr_domain()); },
      [](std::atomic<bool>& stop) {
        quiesce::rcu_thread_online(rcu_qsbr_domain());
        while (!stop.load(std::memory_order_relaxed)) {
          quiesce::rcu_quiescent_state(rcu_qsbr_domain());
        }
        quiesce::rcu_thread_offline(rcu_qsbr_domain());
      });
}
BENCHMARK(quiesce_qsbr_synchronize)->Arg(0)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

void quiesce_retire_until_barrier(benchmark::State& state) {
  for (auto _ : state) {
    for (std::int64_t i = 0; i < rcu_bench::retire_items; ++i)
      quiesce::rcu_retire(new int(1));
    quiesce::rcu_barrier();
  }
  state.SetItemsProcessed(state.iterations() * rcu_bench::retire_items);
}
BENCHMARK(quiesce_retire_until_barrier)->Unit(benchmark::kMillisecond)->UseRealTime();

struct retired : quiesce::rcu_obj_base<retired> {
  int payload = 1;
};

void quiesce_obj_retire_until_barrier(benchmark::State& state) {
  for (auto _ : state) {
    for (std::int64_t i = 0; i < rcu_bench::retire_items; ++i)
      (new retired)->retire();
    quiesce::rcu_barrier();
  }
  state.SetItemsProcessed(state.iterations() * rcu_bench::retire_items);
}
BENCHMARK(quiesce_obj_retire_until_barrier)->Unit(benchmark::kMillisecond)->UseRealTime();

void quiesce_qsbr_obj_retire_until_barrier(benchmark::State& state) {
  quiesce::rcu_domain& d = rcu_qsbr_domain();
  // Online while it retires, as liburcu's QSBR thread is (registered): its grace periods
  // end at the barrier, which takes the caller offline for the wait.
  quiesce::rcu_thread_online(d);
  for (auto _ : state) {
    for (std::int64_t i = 0; i < rcu_bench::retire_items; ++i)
      (new retired)->retire({}, d);
    quiesce::rcu_barrier(d);
  }
  quiesce::rcu_thread_offline(d);
  state.SetItemsProcessed(state.iterations() * rcu_bench::retire_items);
}
BENCHMARK(quiesce_qsbr_obj_retire_until_barrier)->Unit(benchmark::kMillisecond)->UseRealTime();

// The flood (rcu_bench_common.hpp): 64-byte objects, each with its callback inside (as
// liburcu's rcu_head), retired to the default domain.
std::atomic<std::int64_t> g_flood_freed{0};
struct flood_obj;
struct flood_delete {
  void operator()(flood_obj* p) const;
};
struct flood_obj : quiesce::rcu_obj_base<flood_obj, flood_delete> {
  char bytes[64 - sizeof(quiesce::rcu_obj_base<flood_obj, flood_delete>)];
};
static_assert(sizeof(flood_obj) == 64);
void flood_delete::operator()(flood_obj* p) const {
  delete p;
  g_flood_freed.fetch_add(1, std::memory_order_relaxed);
}
void quiesce_retire_flood(benchmark::State& state) {
  rcu_bench::retire_flood(
      state, [] { (new flood_obj)->retire(); }, busy_reader, [] { quiesce::rcu_barrier(); },
      g_flood_freed);
}
BENCHMARK(quiesce_retire_flood)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
