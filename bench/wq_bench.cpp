// Workqueue dispatch against its peers, side by side in one binary:
//   (a) throughput: 1,000,000 empty items posted from one thread, until all have run;
//   (b) post-to-start latency of one item posted to an idle pool (p50 / p99 / p99.9 over
//       10,000 posts; between posts the poster sleeps 200 us so the pool is idle again).
// Peers (Debian packages): oneTBB task_arena with 2 threads, Boost.Asio thread_pool(2),
// and a plain mutex + condition_variable pool of 2 threads.
// Each benchmark is repeated (3 or 5 times) and reported as mean / median / stddev: quote
// the medians, and compare ratios within one run (this machine moves 2-5x between runs).
// Run: build/release/bin/bench_wq   (./quiesce bench runs it too)
#include <benchmark/benchmark.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/workqueue.hpp"

namespace {

constexpr std::int64_t throughput_items = 1'000'000;
constexpr int latency_posts = 10'000;

// ---- the plain pool: one mutex, one condition variable, a deque of closures ----
class mutex_pool {
 public:
  explicit mutex_pool(int threads) {
    for (int i = 0; i < threads; ++i)
      workers_.emplace_back([this] { run(); });
  }
  ~mutex_pool() {
    {
      std::lock_guard guard(lock_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_)
      t.join();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard guard(lock_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::unique_lock guard(lock_);
    for (;;) {
      cv_.wait(guard, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      guard.unlock();
      fn();
      guard.lock();
    }
  }
  std::mutex lock_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

void wait_for_count(const std::atomic<std::int64_t>& done, std::int64_t target) {
  while (done.load(std::memory_order_acquire) < target)
    std::this_thread::yield();
}

void report_latency(benchmark::State& state, const quiesce::histogram& h) {
  state.counters["p50_us"] = static_cast<double>(h.percentile(50)) / 1e3;
  state.counters["p99_us"] = static_cast<double>(h.percentile(99)) / 1e3;
  state.counters["p99.9_us"] = static_cast<double>(h.percentile(99.9)) / 1e3;
}

// ---- (a) throughput ----

void throughput_workqueue(benchmark::State& state, quiesce::wq_options options) {
  quiesce::workqueue wq("bench", options);
  // Work items are objects the caller owns: a ring of them, each re-queued once it ran.
  constexpr std::size_t ring = 65536;
  std::atomic<std::int64_t> done{0};
  std::vector<std::unique_ptr<quiesce::work>> items;
  for (std::size_t i = 0; i < ring; ++i) {
    items.push_back(std::make_unique<quiesce::work>(
        "empty", [&done](quiesce::work&) { done.fetch_add(1, std::memory_order_relaxed); }));
  }
  for (auto _ : state) {
    done = 0;
    for (std::int64_t i = 0; i < throughput_items; ++i) {
      quiesce::work& w = *items[static_cast<std::size_t>(i) % ring];
      while (!wq.queue(w))
        std::this_thread::yield();  // still pending from the last lap
    }
    wait_for_count(done, throughput_items);
  }
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK_CAPTURE(throughput_workqueue, bound, quiesce::wq_options{})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);
BENCHMARK_CAPTURE(throughput_workqueue, unbound, quiesce::wq_options{.unbound = true})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void throughput_tbb(benchmark::State& state) {
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, 3);
  tbb::task_arena arena(2, 0);  // 2 workers, none reserved for the poster (machine.md)
  tbb::task_group group;
  std::atomic<std::int64_t> done{0};
  for (auto _ : state) {
    done = 0;
    arena.execute([&] {
      for (std::int64_t i = 0; i < throughput_items; ++i) {
        arena.enqueue([&done] { done.fetch_add(1, std::memory_order_relaxed); });
      }
    });
    wait_for_count(done, throughput_items);
  }
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_tbb)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void throughput_asio(benchmark::State& state) {
  boost::asio::thread_pool pool(2);
  std::atomic<std::int64_t> done{0};
  for (auto _ : state) {
    done = 0;
    for (std::int64_t i = 0; i < throughput_items; ++i) {
      boost::asio::post(pool, [&done] { done.fetch_add(1, std::memory_order_relaxed); });
    }
    wait_for_count(done, throughput_items);
  }
  pool.join();
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_asio)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void throughput_mutex_pool(benchmark::State& state) {
  mutex_pool pool(2);
  std::atomic<std::int64_t> done{0};
  for (auto _ : state) {
    done = 0;
    for (std::int64_t i = 0; i < throughput_items; ++i) {
      pool.post([&done] { done.fetch_add(1, std::memory_order_relaxed); });
    }
    wait_for_count(done, throughput_items);
  }
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_mutex_pool)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

// ---- (b) post-to-start latency to an idle pool ----

// Posts one item at a time with `post(fn)` and records post -> start.
template <typename Post>
void latency_loop(benchmark::State& state, Post post) {
  quiesce::histogram h;
  for (auto _ : state) {
    for (int i = 0; i < latency_posts; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the pool idle
      std::atomic<std::uint64_t> started{0};
      const std::uint64_t t0 = quiesce::now_ns();
      post([&started] { started.store(quiesce::now_ns(), std::memory_order_release); });
      std::uint64_t s;
      while ((s = started.load(std::memory_order_acquire)) == 0)
        std::this_thread::yield();
      h.record(s - t0);
    }
  }
  report_latency(state, h);
}

void latency_workqueue(benchmark::State& state, quiesce::wq_options options) {
  quiesce::workqueue wq("bench-lat", options);
  std::function<void()> fn;
  quiesce::work item("lat", [&fn](quiesce::work&) { fn(); });
  latency_loop(state, [&](std::function<void()> f) {
    item.flush();  // the previous run has finished
    fn = std::move(f);
    wq.queue(item);
  });
  item.flush();
}
BENCHMARK_CAPTURE(latency_workqueue, bound, quiesce::wq_options{})
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(latency_workqueue, unbound, quiesce::wq_options{.unbound = true})
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMillisecond);

void latency_tbb(benchmark::State& state) {
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, 3);
  tbb::task_arena arena(2, 0);
  latency_loop(state, [&](std::function<void()> f) { arena.enqueue(std::move(f)); });
}
BENCHMARK(latency_tbb)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMillisecond);

void latency_asio(benchmark::State& state) {
  boost::asio::thread_pool pool(2);
  latency_loop(state, [&](std::function<void()> f) { boost::asio::post(pool, std::move(f)); });
  pool.join();
}
BENCHMARK(latency_asio)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMillisecond);

void latency_mutex_pool(benchmark::State& state) {
  mutex_pool pool(2);
  latency_loop(state, [&](std::function<void()> f) { pool.post(std::move(f)); });
}
BENCHMARK(latency_mutex_pool)
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
