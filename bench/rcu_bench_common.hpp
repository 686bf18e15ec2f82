// SPDX-License-Identifier: Apache-2.0
// Shared shapes of the RCU benchmarks, so quiesce and liburcu run the very same loops.
#pragma once

#include <benchmark/benchmark.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "resident.hpp"

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

// A retire flood: one thread retires 64-byte objects (each with its callback head inside:
// quiesce's rcu_obj_base, liburcu's rcu_head) at up to flood_rate a second for
// flood_seconds() while a reader thread runs read-side sections; `retire()` allocates and
// retires one object whose deleter counts `freed`. Reports the peak of objects retired and
// not yet freed (sampled every 256 retires), the peak growth of the resident set over the
// flood (/proc/self/statm, sampled every millisecond by a thread of its own, from a heap
// trimmed first so that each repetition starts alike), and the rate reached (a bounded
// retire waits, so it may fall short of flood_rate).
inline constexpr std::uint64_t flood_rate = 10'000'000;  // objects a second, at most
inline constexpr std::uint64_t flood_batch = 256;

// QUIESCE_FLOOD_SECONDS (a positive number; `quiesce bench peers --quick` sets 1), else 10.
inline double flood_seconds() {
  if (const char* env = std::getenv("QUIESCE_FLOOD_SECONDS")) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (end != env && *end == '\0' && s > 0 && s <= 3600) return s;
    std::fprintf(stderr, "QUIESCE_FLOOD_SECONDS=%s: not a number of seconds in (0, 3600]\n", env);
    std::exit(2);
  }
  return 10;
}

template <typename Retire, typename ReaderLoop, typename Barrier>
void retire_flood(benchmark::State& state, Retire retire, ReaderLoop reader_loop, Barrier barrier,
                  const std::atomic<std::int64_t>& freed) {
  const auto flood_ns = static_cast<std::uint64_t>(flood_seconds() * 1e9);
  std::atomic<bool> stop{false};
  std::thread reader([&] { reader_loop(stop); });
  std::int64_t peak_pending = 0, peak_rss = 0, retired = 0;
  for (auto _ : state) {
    barrier();
    ::malloc_trim(0);  // what earlier floods left to malloc goes back to the kernel
    const std::int64_t rss0 = resident_bytes();
    const std::int64_t freed0 = freed.load();
    std::atomic<bool> sampling{true};
    std::atomic<std::int64_t> rss_peak{rss0};
    std::thread sampler([&] {
      while (sampling.load(std::memory_order_relaxed)) {
        const std::int64_t r = resident_bytes();
        if (r > rss_peak.load()) rss_peak.store(r);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    const std::uint64_t start = quiesce::now_ns(), end = start + flood_ns;
    std::int64_t n = 0;
    for (std::uint64_t now = start; now < end; now = quiesce::now_ns()) {
      // Paced: never more than flood_rate * elapsed retired.
      if (static_cast<double>(n) >= static_cast<double>(now - start) * 1e-9 * flood_rate) {
        continue;
      }
      for (std::uint64_t i = 0; i < flood_batch; ++i)
        retire();
      n += flood_batch;
      peak_pending = std::max(peak_pending, n - (freed.load(std::memory_order_relaxed) - freed0));
    }
    sampling = false;
    sampler.join();
    barrier();
    retired += n;
    peak_rss = std::max(peak_rss, rss_peak.load() - rss0);
  }
  stop = true;
  reader.join();
  state.counters["peak_unreclaimed"] = static_cast<double>(peak_pending);
  state.counters["peak_rss_mib"] = static_cast<double>(peak_rss) / (1 << 20);
  state.counters["retires_per_s"] = static_cast<double>(retired) /
                                    (static_cast<double>(flood_ns) / 1e9) /
                                    static_cast<double>(state.iterations());
}

}  // namespace rcu_bench
