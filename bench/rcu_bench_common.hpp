// SPDX-License-Identifier: Apache-2.0
// Shared shapes of the RCU benchmarks, so quiesce and liburcu run the very same loops.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"

namespace rcu_bench {

// At least this many synchronize calls, over at least sync_span: with busy readers on
// every CPU the syncer shares a CPU with one of them, and the scheduler settles into one
// of two modes for tens of milliseconds at a time (the reader that holds a grace period
// runs at once, or only after the syncer sleeps). A span of many such periods measures
// their mixture, not the luck of one (../shared/reference/machine.md).
inline constexpr int sync_samples = 2000;
inline constexpr std::uint64_t sync_span_ns = 300'000'000;
inline constexpr std::int64_t retire_items = 1'000'000;

// Calls `sync()` sync_samples times (and for at least sync_span_ns) while `busy_readers`
// threads run `reader_loop(stop)`;
// reports p50/p99 of one synchronize in microseconds.
template <typename Sync, typename ReaderLoop>
void synchronize_latency(benchmark::State& state, Sync sync, ReaderLoop reader_loop) {
  const int busy_readers = static_cast<int>(state.range(0));
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < busy_readers; ++i)
    readers.emplace_back([&] { reader_loop(stop); });
  quiesce::histogram h;
  for (auto _ : state) {
    const std::uint64_t begin = quiesce::now_ns();
    for (int i = 0; i < sync_samples || quiesce::now_ns() - begin < sync_span_ns; ++i) {
      const std::uint64_t t0 = quiesce::now_ns();
      sync();
      h.record(quiesce::now_ns() - t0);
    }
  }
  stop = true;
  for (auto& t : readers)
    t.join();
  state.counters["p50_us"] = static_cast<double>(h.percentile(50)) / 1e3;
  state.counters["p99_us"] = static_cast<double>(h.percentile(99)) / 1e3;
}

}  // namespace rcu_bench
