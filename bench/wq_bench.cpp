// SPDX-License-Identifier: Apache-2.0
// Workqueue dispatch against its peers, side by side in one binary:
//   (a) throughput: 1,000,000 empty items posted from one thread, or from two (500,000
//       each), until all have run;
//   (b) post-to-start latency of one item posted to an idle pool (p50 / p99 / p99.9 over
//       2,000 posts; between posts the poster sleeps 200 us so the pool is idle again);
//   (c) quiesce alone, how cost grows with work: throughput for 10^3 .. 10^7 items, and
//       queue-to-start percentiles of a burst of 1 .. 100,000 items queued at once;
//   (d) round trips (the kernel's lib/test_workqueue.c shape): producers each post an item
//       and wait for it to finish, 100,000 in all;
//   (e) post-to-start latency as (b), while one CPU-bound thread per CPU spins at normal
//       priority: quiesce's highpri per-CPU queue against the peers' pools;
//   (f) quiesce alone, what a post's footprint costs over time: sixteen rounds of (a)'s
//       two-poster posts in one run, the first round's and the last's rate and the
//       resident set after each (post_footprint; run it alone for a fresh process).
// Peers (Debian packages): oneTBB task_arena with 2 threads, Boost.Asio thread_pool(2),
// and a plain mutex + condition_variable pool of 2 threads.
// One repetition is one run of the loop (Iterations(1)); repeat with
// --benchmark_repetitions=N and quote medians, comparing ratios within one run (this
// machine moves 2-5x between runs). `quiesce bench peers` runs this with repetitions and
// prints the ratio table.
// Run: build/release/bin/bench_wq --benchmark_repetitions=3   (./quiesce bench runs it too)
// QUIESCE_BENCH_DIVISOR=N (1..1000) divides the fixed sizes of (a), (b), (d) and (e) by N:
// `quiesce bench peers --smoke` and `quiesce report --smoke` set 20, to check that every row
// runs; such figures measure nothing.
#include <benchmark/benchmark.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/workqueue.hpp"
#include "resident.hpp"

namespace {

// QUIESCE_BENCH_DIVISOR, else 1; exits naming the variable when it is not a whole number in
// [1, 1000].
int size_divisor() {
  const char* env = std::getenv("QUIESCE_BENCH_DIVISOR");
  if (env == nullptr) return 1;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end != env && *end == '\0' && n >= 1 && n <= 1000) return static_cast<int>(n);
  std::fprintf(stderr, "QUIESCE_BENCH_DIVISOR=%s: not a whole number in [1, 1000]\n", env);
  std::exit(2);
}

const std::int64_t throughput_items = 1'000'000 / size_divisor();
const int latency_posts = 2'000 / size_divisor();

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

// The throughput rows' count of finished items, without a line every worker writes: each
// thread counts in a slot of its own (a cache line; threads past the slots share them,
// atomically), and the waiter sums the slots. One shared counter made every empty item a
// cache-line transfer whenever workers on two CPUs finished items in turn - a cost of the
// benchmark, not of the runtime, and one that fell only on runtimes that run items on both
// CPUs at once: 20% of the samples of a bound quiesce queue fed from two posters, in the
// increment alone (perf, 2026-12-06). Every runtime's items count here the same way.
class item_count {
 public:
  void add() noexcept { slots_[my_slot()].n.fetch_add(1, std::memory_order_relaxed); }
  std::int64_t sum() const noexcept {
    std::int64_t total = 0;
    for (const slot& s : slots_)
      total += s.n.load(std::memory_order_acquire);
    return total;
  }
  // Only while no item is in flight (between runs).
  void reset() noexcept {
    for (slot& s : slots_)
      s.n.store(0, std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t nr_slots = 64;
  struct alignas(64) slot {
    std::atomic<std::int64_t> n{0};
  };
  static std::size_t my_slot() noexcept {
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed) % nr_slots;
    return mine;
  }
  slot slots_[nr_slots];
};

void wait_for_count(const item_count& done, std::int64_t target) {
  while (done.sum() < target)
    std::this_thread::yield();
}

void report_latency(benchmark::State& state, const quiesce::histogram& h) {
  state.counters["p50_us"] = static_cast<double>(h.percentile(50)) / 1e3;
  state.counters["p99_us"] = static_cast<double>(h.percentile(99)) / 1e3;
  state.counters["p99.9_us"] = static_cast<double>(h.percentile(99.9)) / 1e3;
}

// ---- (a) throughput ----

// One run: `posters` threads each post `per_poster` items with post(poster, i), then the
// caller waits until `done` counts them all.
template <typename Post>
void post_from(int posters, std::int64_t total, item_count& done, Post post) {
  done.reset();
  const std::int64_t per_poster = total / posters;
  std::vector<std::thread> threads;
  for (int t = 0; t < posters; ++t) {
    threads.emplace_back([&, t] {
      for (std::int64_t i = 0; i < per_poster; ++i)
        post(t, i);
    });
  }
  for (auto& t : threads)
    t.join();
  wait_for_count(done, per_poster * posters);
}

// The CPUs this process may use: the peers' pools get one worker per CPU (at least 2),
// as quiesce's unbound pool may run one per CPU of its scope - on a 2-CPU machine the
// 2-worker pools of machine.md, on a bigger one the same rule.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 2;
  return CPU_COUNT(&set);
}
int peer_workers() {
  return std::max(2, usable_cpus());
}

// Posters: 1 and 2, then each power of two up to the usable CPUs (a bigger machine checks
// how dispatch scales: bench_wq --benchmark_filter='^throughput_').
void throughput_args(benchmark::internal::Benchmark* b) {
  b->ArgName("posters")->Arg(1)->Arg(2);
  for (int p = 4; p <= usable_cpus(); p *= 2)
    b->Arg(p);
  b->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Work items are objects the caller owns: a ring of them per poster, each re-queued once it
// ran (a still-pending one is waited for).
class item_rings {
 public:
  item_rings(int posters, item_count& done) {
    for (int t = 0; t < posters; ++t) {
      auto& ring = rings_.emplace_back();
      for (std::size_t i = 0; i < ring_size; ++i) {
        ring.push_back(
            std::make_unique<quiesce::work>("empty", [&done](quiesce::work&) { done.add(); }));
      }
    }
  }
  quiesce::work& at(int poster, std::int64_t i) {
    return *rings_[static_cast<std::size_t>(poster)][static_cast<std::size_t>(i) % ring_size];
  }

 private:
  static constexpr std::size_t ring_size = 65536;
  std::vector<std::vector<std::unique_ptr<quiesce::work>>> rings_;
};

void queue_all(quiesce::workqueue& wq, item_rings& rings, int posters, std::int64_t items,
               item_count& done) {
  post_from(posters, items, done, [&](int t, std::int64_t i) {
    quiesce::work& w = rings.at(t, i);
    while (!wq.queue(w))
      std::this_thread::yield();  // still pending from the last lap
  });
}

void throughput_workqueue(benchmark::State& state, quiesce::wq_options options) {
  const int posters = static_cast<int>(state.range(0));
  quiesce::workqueue wq("bench", options);
  item_count done;
  item_rings rings(posters, done);
  for (auto _ : state)
    queue_all(wq, rings, posters, throughput_items, done);
  wq.flush();  // the last items may still be finishing: they die with `rings`
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK_CAPTURE(throughput_workqueue, bound, quiesce::wq_options{})->Apply(throughput_args);
BENCHMARK_CAPTURE(throughput_workqueue, unbound, quiesce::wq_options{.unbound = true})
    ->Apply(throughput_args);

// The same items as fire-and-forget lambdas: workqueue::post (a node from the per-CPU free
// lists, the lambda held in it), as Asio's post and TBB's enqueue below take them.
void throughput_post(benchmark::State& state, quiesce::wq_options options) {
  const int posters = static_cast<int>(state.range(0));
  quiesce::workqueue wq("bench_post", options);
  item_count done;
  for (auto _ : state) {
    post_from(posters, throughput_items, done,
              [&](int, std::int64_t) { wq.post([&done] { done.add(); }); });
  }
  wq.flush();
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK_CAPTURE(throughput_post, bound, quiesce::wq_options{})->Apply(throughput_args);
BENCHMARK_CAPTURE(throughput_post, unbound, quiesce::wq_options{.unbound = true})
    ->Apply(throughput_args);

// ---- (f) a post's footprint over time ----
// Posted nodes are kept on free lists while posts keep taking them (src/wq/post.cpp gives
// back only what stayed unused for a second): a poster that runs ahead of the workers leaves
// as many nodes as the backlog's peak, and later rounds, back to back, walk that much colder
// memory (docs/workqueue.md, "post"). Sixteen rounds of two posters'
// 1M posts; counters: the first and the last round's rate (M items/s) and the resident set
// after each (MB). The rounds of a fresh process show the growth: run this benchmark alone.
void post_footprint(benchmark::State& state, quiesce::wq_options options) {
  constexpr int rounds = 16;
  quiesce::workqueue wq("bench_footprint", options);
  item_count done;
  for (auto _ : state) {
    for (int round = 1; round <= rounds; ++round) {
      const std::uint64_t t0 = quiesce::now_ns();
      post_from(2, throughput_items, done,
                [&](int, std::int64_t) { wq.post([&done] { done.add(); }); });
      const double rate = static_cast<double>(throughput_items) * 1e3 /
                          static_cast<double>(quiesce::now_ns() - t0);  // M items/s
      if (round == 1 || round == rounds) {
        const std::string which = round == 1 ? "first" : "last";
        state.counters[which + "_M_per_s"] = rate;
        state.counters[which + "_rss_MB"] = static_cast<double>(resident_bytes()) / 1048576.0;
      }
    }
  }
  wq.flush();
  state.SetItemsProcessed(state.iterations() * rounds * throughput_items);
}
BENCHMARK_CAPTURE(post_footprint, bound, quiesce::wq_options{})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(post_footprint, unbound, quiesce::wq_options{.unbound = true})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void throughput_tbb(benchmark::State& state) {
  const int posters = static_cast<int>(state.range(0));
  const int workers = peer_workers();
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, workers + posters);
  tbb::task_arena arena(workers, 0);  // none reserved for the posters (machine.md)
  item_count done;
  for (auto _ : state) {
    post_from(posters, throughput_items, done,
              [&](int, std::int64_t) { arena.enqueue([&done] { done.add(); }); });
  }
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_tbb)->Apply(throughput_args);

void throughput_asio(benchmark::State& state) {
  const int posters = static_cast<int>(state.range(0));
  boost::asio::thread_pool pool(static_cast<std::size_t>(peer_workers()));
  item_count done;
  for (auto _ : state) {
    post_from(posters, throughput_items, done,
              [&](int, std::int64_t) { boost::asio::post(pool, [&done] { done.add(); }); });
  }
  pool.join();
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_asio)->Apply(throughput_args);

void throughput_mutex_pool(benchmark::State& state) {
  const int posters = static_cast<int>(state.range(0));
  mutex_pool pool(peer_workers());
  item_count done;
  for (auto _ : state) {
    post_from(posters, throughput_items, done,
              [&](int, std::int64_t) { pool.post([&done] { done.add(); }); });
  }
  state.SetItemsProcessed(state.iterations() * throughput_items);
}
BENCHMARK(throughput_mutex_pool)->Apply(throughput_args);

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

void latency_args(benchmark::internal::Benchmark* b) {
  b->Iterations(1)->Unit(benchmark::kMillisecond);
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
BENCHMARK_CAPTURE(latency_workqueue, bound, quiesce::wq_options{})->Apply(latency_args);
BENCHMARK_CAPTURE(latency_workqueue, unbound, quiesce::wq_options{.unbound = true})
    ->Apply(latency_args);

void latency_tbb(benchmark::State& state) {
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, 3);
  tbb::task_arena arena(2, 0);
  latency_loop(state, [&](std::function<void()> f) { arena.enqueue(std::move(f)); });
}
BENCHMARK(latency_tbb)->Apply(latency_args);

void latency_asio(benchmark::State& state) {
  boost::asio::thread_pool pool(2);
  latency_loop(state, [&](std::function<void()> f) { boost::asio::post(pool, std::move(f)); });
  pool.join();
}
BENCHMARK(latency_asio)->Apply(latency_args);

void latency_mutex_pool(benchmark::State& state) {
  mutex_pool pool(2);
  latency_loop(state, [&](std::function<void()> f) { pool.post(std::move(f)); });
}
BENCHMARK(latency_mutex_pool)->Apply(latency_args);

// ---- (d) round trips: the kernel's own benchmark shape ----
// lib/test_workqueue.c (2026): each of N producers queues an item and waits for it to
// finish, again and again. Here every runtime does the same through its C++ call - post a
// lambda that releases a completion the producer waits on (std::atomic wait/notify, a
// futex) - so the row measures a post, a wake-up, a run and a wake-up back.
const std::int64_t round_trips = 100'000 / size_divisor();

template <typename Post>
void round_trip_loop(benchmark::State& state, Post post) {
  const int producers = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&] {
        for (std::int64_t i = 0; i < round_trips / producers; ++i) {
          std::atomic<bool> done{false};
          post([&done] {
            done.store(true, std::memory_order_release);
            done.notify_one();
          });
          done.wait(false, std::memory_order_acquire);
        }
      });
    }
    for (auto& t : threads)
      t.join();
  }
  state.SetItemsProcessed(state.iterations() * (round_trips / producers) * producers);
}

void round_trip_args(benchmark::internal::Benchmark* b) {
  b->ArgName("producers")->Arg(1)->Arg(2);
  for (int p = 4; p <= usable_cpus(); p *= 2)
    b->Arg(p);
  b->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void round_trip_workqueue(benchmark::State& state, quiesce::wq_options options) {
  quiesce::workqueue wq("bench-rt", options);
  round_trip_loop(state, [&](auto&& f) { wq.post(std::forward<decltype(f)>(f)); });
}
BENCHMARK_CAPTURE(round_trip_workqueue, bound, quiesce::wq_options{})->Apply(round_trip_args);
BENCHMARK_CAPTURE(round_trip_workqueue, unbound, quiesce::wq_options{.unbound = true})
    ->Apply(round_trip_args);

void round_trip_tbb(benchmark::State& state) {
  const int workers = peer_workers();
  tbb::global_control control(tbb::global_control::max_allowed_parallelism,
                              workers + static_cast<int>(state.range(0)));
  tbb::task_arena arena(workers, 0);
  round_trip_loop(state, [&](auto&& f) { arena.enqueue(std::forward<decltype(f)>(f)); });
}
BENCHMARK(round_trip_tbb)->Apply(round_trip_args);

void round_trip_asio(benchmark::State& state) {
  boost::asio::thread_pool pool(static_cast<std::size_t>(peer_workers()));
  round_trip_loop(state, [&](auto&& f) { boost::asio::post(pool, std::forward<decltype(f)>(f)); });
  pool.join();
}
BENCHMARK(round_trip_asio)->Apply(round_trip_args);

void round_trip_mutex_pool(benchmark::State& state) {
  mutex_pool pool(peer_workers());
  round_trip_loop(state, [&](auto&& f) { pool.post(std::forward<decltype(f)>(f)); });
}
BENCHMARK(round_trip_mutex_pool)->Apply(round_trip_args);

// ---- (e) post -> start under load: what a priority buys ----
// One CPU-bound thread per usable CPU, each pinned to its CPU at normal priority, spins
// for the whole run; the poster posts one item at a time as in (b). quiesce posts to a
// highpri per-CPU queue (workers at nice -20, the kernel's WQ_HIGHPRI; without the
// privilege to raise priority they stay at nice 0 and the row shows it); the peers' pools
// have no priority to give. machine.md: on these guests the floor is the host's
// scheduling of the vCPUs, below that the guest's wake-up preemption.
class cpu_load {
 public:
  cpu_load() {
    cpu_set_t set;
    CPU_ZERO(&set);
    ::sched_getaffinity(0, sizeof(set), &set);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      spinners_.emplace_back([this, cpu] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        ::pthread_setaffinity_np(::pthread_self(), sizeof(one), &one);
        while (!stop_.load(std::memory_order_relaxed)) {
          for (int i = 0; i < 1000; ++i)
            benchmark::DoNotOptimize(i);
        }
      });
    }
  }
  ~cpu_load() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& t : spinners_)
      t.join();
  }
  cpu_load(const cpu_load&) = delete;
  cpu_load& operator=(const cpu_load&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> spinners_;
};

void loaded_workqueue(benchmark::State& state) {
  quiesce::workqueue wq("bench-loaded", quiesce::wq_options{.highpri = true});
  wq.post([] {});  // the pool's first worker exists before the load starts
  wq.flush();
  cpu_load load;
  latency_loop(state, [&](std::function<void()> f) { wq.post(std::move(f)); });
  wq.flush();
}
BENCHMARK(loaded_workqueue)->Apply(latency_args);

void loaded_tbb(benchmark::State& state) {
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, 3);
  tbb::task_arena arena(2, 0);
  cpu_load load;
  latency_loop(state, [&](std::function<void()> f) { arena.enqueue(std::move(f)); });
}
BENCHMARK(loaded_tbb)->Apply(latency_args);

void loaded_asio(benchmark::State& state) {
  boost::asio::thread_pool pool(2);
  {
    cpu_load load;
    latency_loop(state, [&](std::function<void()> f) { boost::asio::post(pool, std::move(f)); });
  }
  pool.join();
}
BENCHMARK(loaded_asio)->Apply(latency_args);

void loaded_mutex_pool(benchmark::State& state) {
  mutex_pool pool(2);
  cpu_load load;
  latency_loop(state, [&](std::function<void()> f) { pool.post(std::move(f)); });
}
BENCHMARK(loaded_mutex_pool)->Apply(latency_args);

// ---- (c) how cost grows with work (quiesce only) ----

// Throughput of N empty items from one thread, N = 10^3 .. 10^7.
void scaling_throughput(benchmark::State& state, quiesce::wq_options options) {
  const std::int64_t items = state.range(0);
  quiesce::workqueue wq("bench-scale", options);
  item_count done;
  item_rings rings(1, done);
  for (auto _ : state)
    queue_all(wq, rings, 1, items, done);
  wq.flush();  // the last items may still be finishing: they die with `rings`
  state.SetItemsProcessed(state.iterations() * items);
}
void scaling_args(benchmark::internal::Benchmark* b) {
  b->ArgName("items")->RangeMultiplier(10)->Range(1'000, 10'000'000)->Iterations(1);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK_CAPTURE(scaling_throughput, bound, quiesce::wq_options{})->Apply(scaling_args);
BENCHMARK_CAPTURE(scaling_throughput, unbound, quiesce::wq_options{.unbound = true})
    ->Apply(scaling_args);

// Queue-to-start of every item of a burst of Q items queued at once onto an idle queue:
// p50 / p99 / max over at least 10,000 items (bursts repeated, the queue idle between).
void burst_latency(benchmark::State& state, quiesce::wq_options options) {
  const auto burst = static_cast<std::size_t>(state.range(0));
  quiesce::workqueue wq("bench-burst", options);
  // Each item stamps its own start; the poster reads the stamps after the burst.
  std::vector<std::uint64_t> queued_at(burst), started_at(burst);
  quiesce::histogram h;
  std::atomic<std::int64_t> done{0};
  std::vector<std::unique_ptr<quiesce::work>> items;
  for (std::size_t i = 0; i < burst; ++i) {
    items.push_back(std::make_unique<quiesce::work>("burst", [&, i](quiesce::work&) {
      started_at[i] = quiesce::now_ns();
      done.fetch_add(1, std::memory_order_release);
    }));
  }
  for (auto _ : state) {
    const std::size_t bursts = std::max<std::size_t>(1, 10'000 / burst);
    for (std::size_t b = 0; b < bursts; ++b) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      done.store(0, std::memory_order_relaxed);
      for (std::size_t i = 0; i < burst; ++i) {
        queued_at[i] = quiesce::now_ns();
        wq.queue(*items[i]);
      }
      wait_for_count(done, static_cast<std::int64_t>(burst));
      for (std::size_t i = 0; i < burst; ++i)
        h.record(started_at[i] - queued_at[i]);
    }
  }
  wq.flush();  // the last item may still be finishing: it dies with `items`
  state.counters["p50_us"] = static_cast<double>(h.percentile(50)) / 1e3;
  state.counters["p99_us"] = static_cast<double>(h.percentile(99)) / 1e3;
  state.counters["max_us"] = static_cast<double>(h.max()) / 1e3;
}
void burst_args(benchmark::internal::Benchmark* b) {
  b->ArgName("queued")->RangeMultiplier(10)->Range(1, 100'000)->Iterations(1);
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(burst_latency, bound, quiesce::wq_options{})->Apply(burst_args);

}  // namespace

BENCHMARK_MAIN();
