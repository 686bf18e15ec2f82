// SPDX-License-Identifier: Apache-2.0
// Costs of the base layer's hot operations: a clock read, a histogram record, a schedstat
// sample. Run: build/release/bin/bench_base (or ./quiesce bench).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/summary.hpp"
#include "quiesce/trace.hpp"

namespace {

void BM_now_ns(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(quiesce::now_ns());
}
BENCHMARK(BM_now_ns);

void BM_thread_cpu_ns(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(quiesce::thread_cpu_ns());
}
BENCHMARK(BM_thread_cpu_ns);

void BM_histogram_record(benchmark::State& state) {
  // Latency-like values spread over 1 us .. 10 ms, pre-generated so only record() is timed.
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::uint64_t> dist(1'000, 10'000'000);
  std::vector<std::uint64_t> values(4096);
  for (auto& v : values)
    v = dist(rng);
  quiesce::histogram h;
  std::size_t i = 0;
  for (auto _ : state) {
    h.record(values[i++ & 4095]);
  }
  benchmark::DoNotOptimize(h.count());
}
BENCHMARK(BM_histogram_record);

void BM_histogram_percentile(benchmark::State& state) {
  quiesce::histogram h;
  for (std::uint64_t v = 1; v < 1'000'000; v += 7)
    h.record(v * 13);
  for (auto _ : state)
    benchmark::DoNotOptimize(h.percentile(99.0));
}
BENCHMARK(BM_histogram_percentile);

void BM_summary_add(benchmark::State& state) {
  quiesce::summary s;
  double x = 1.0;
  for (auto _ : state) {
    s.add(x);
    x += 0.5;
  }
  benchmark::DoNotOptimize(s.variance());
}
BENCHMARK(BM_summary_add);

void BM_schedstat_open_read_close(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(quiesce::read_schedstat());
}
BENCHMARK(BM_schedstat_open_read_close);

void BM_schedstat_kept_open(benchmark::State& state) {
  quiesce::schedstat_reader reader;
  if (!reader.available()) {
    state.SkipWithError("schedstat unavailable");
    return;
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(reader.sample());
}
BENCHMARK(BM_schedstat_kept_open);

void BM_trace_emit(benchmark::State& state) {
  quiesce::trace::enable(state.range(0) != 0);
  quiesce::trace::event e;
  e.name = quiesce::trace::workqueue_execute_start;
  for (auto _ : state) {
    e.ts_ns++;
    quiesce::trace::emit(e);
  }
  quiesce::trace::enable(false);
  state.SetLabel(state.range(0) ? "tracing on" : "tracing off");
}
BENCHMARK(BM_trace_emit)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
