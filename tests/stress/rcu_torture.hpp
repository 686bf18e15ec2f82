// SPDX-License-Identifier: Apache-2.0
// rcutorture for quiesce's RCU domains (after kernel/rcu/rcutorture.c).
//
// A writer publishes elements from a pool; each removed element's pipe_count is advanced
// after every grace period the writer waits for, and at pipe_len its mbtest flag is cleared
// and the element returns to the pool (it is "freed"). Readers record, in the Reader Pipe
// histogram, the pipe_count of the element they see, and in the Reader Batch histogram how
// many grace periods started during their read.
//
// The criterion: an element's count is 0 while it is published and becomes 1 only after a
// full grace period has passed since its removal - so a reader that sees any count >= 1
// read across a whole grace period (this harness, unlike the kernel's, does not advance
// the count at removal). Pipe[1] > 0 is a FAILURE, as is an element with mbtest == 0.
// A grace period that ends one period early shows up in Pipe[1].
//
// What it exercises: reader threads that come and go (registration churn), with a read in
// a thread_local destructor of each; nested sections (default domain); QSBR/Tasks readers
// going offline and online; the writer's grace periods by rcu_synchronize, by rcu_call +
// rcu_barrier, by a polling cookie, and by rcu_obj_base::retire; fake writers that
// synchronize, barrier, call and poll cookies from several threads.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/rcu.hpp"

namespace quiesce::test {

inline constexpr int pipe_len = 10;  // RCU_TORTURE_PIPE_LEN

struct torture_result {
  std::array<std::uint64_t, pipe_len + 2> pipe{};   // Reader Pipe
  std::array<std::uint64_t, pipe_len + 2> batch{};  // Reader Batch
  std::uint64_t reads = 0, exit_reads = 0, reader_threads = 0, updates = 0, mbtest_failures = 0,
                fake_writes = 0, grace_periods = 0,
                poll_failures = 0;  // a cookie not done after a synchronize that followed it
  double seconds = 0;

  bool failed() const {
    if (mbtest_failures || poll_failures) return true;
    for (std::size_t i = 1; i < pipe.size(); ++i) {
      if (pipe[i]) return true;
    }
    return false;
  }
  void add(const torture_result& r) {
    for (std::size_t i = 0; i < pipe.size(); ++i) {
      pipe[i] += r.pipe[i];
      batch[i] += r.batch[i];
    }
    reads += r.reads;
    exit_reads += r.exit_reads;
    mbtest_failures += r.mbtest_failures;
  }
  std::string report(const char* domain) const {
    std::ostringstream out;
    out << domain << ": " << (failed() ? "FAILURE" : "SUCCESS") << " reads=" << reads
        << " (in thread exit: " << exit_reads << ", reader threads: " << reader_threads
        << ") updates=" << updates << " grace_periods=" << grace_periods << " in " << seconds
        << " s, fake_writes=" << fake_writes << " mbtest_failures=" << mbtest_failures
        << " poll_failures=" << poll_failures << "\nReader Pipe:";
    for (auto v : pipe)
      out << ' ' << v;
    out << "\nReader Batch:";
    for (auto v : batch)
      out << ' ' << v;
    return out.str();
  }
};

namespace torture_detail {

struct element {
  std::atomic<int> pipe{0};
  std::atomic<int> mbtest{0};
  bool in_use = false;  // writer only
};

// What a reader thread needs; one per reader slot.
struct reader_ctx {
  rcu_domain* domain = nullptr;
  bool memb = false, qsbr = false, tasks = false;
  std::atomic<element*>* current = nullptr;
  torture_result res;  // W: the reader thread, then read by the slot after join
};

// One read-side section: record what was seen.
inline void read_once(reader_ctx& c, std::minstd_rand& rng, bool count_as_exit) {
  const std::uint64_t gp_before = rcu_get_cookie(*c.domain).gp;
  rcu_domain& d = *c.domain;
  const bool nest = c.memb && rng() % 8 == 0;
  d.lock();
  if (nest) d.lock();
  element* p = c.current->load(std::memory_order_acquire);
  // Linger inside the section now and then, to widen the windows.
  if (rng() % 16 == 0) {
    for (int i = 0; i < 50; ++i)
      std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  if (rng() % 64 == 0) std::this_thread::yield();
  if (p->mbtest.load(std::memory_order_acquire) == 0) ++c.res.mbtest_failures;
  int pc = p->pipe.load(std::memory_order_acquire);
  if (pc > pipe_len) pc = pipe_len;
  ++c.res.pipe[static_cast<std::size_t>(pc)];
  if (nest) d.unlock();
  d.unlock();
  const std::uint64_t gp_after = rcu_get_cookie(d).gp;
  ++c.res.batch[std::min<std::uint64_t>(gp_after - gp_before, pipe_len + 1)];
  ++c.res.reads;
  if (count_as_exit) ++c.res.exit_reads;
}

// A thread_local whose destructor reads once more: a reader during thread exit. Constructed
// before the thread's first lock() or online, so destroyed after anything registered later.
struct exit_reader {
  reader_ctx* ctx = nullptr;
  ~exit_reader() {
    if (!ctx) return;
    std::minstd_rand rng(7);
    if (ctx->qsbr || ctx->tasks) rcu_thread_online(*ctx->domain);
    read_once(*ctx, rng, /*count_as_exit=*/true);
    if (ctx->qsbr || ctx->tasks) rcu_thread_offline(*ctx->domain);
  }
};
inline thread_local exit_reader tls_exit_reader;

// A reader thread's life: some reads, then exit (with one more read in its exit).
inline void reader_life(reader_ctx& c, unsigned seed, const std::atomic<bool>& stop) {
  tls_exit_reader.ctx = &c;
  std::minstd_rand rng(seed);
  if (c.qsbr || c.tasks) rcu_thread_online(*c.domain);
  const unsigned reads = 200 + rng() % 20000;
  for (unsigned i = 0; i < reads && !stop.load(std::memory_order_relaxed); ++i) {
    read_once(c, rng, false);
    if (c.qsbr) rcu_quiescent_state(*c.domain);
    if (c.tasks) cond_resched_tasks_qs();
    if ((c.qsbr || c.tasks) && rng() % 32 == 0) {  // offline / online cycle
      rcu_thread_offline(*c.domain);
      rcu_thread_online(*c.domain);
    }
  }
  if ((c.qsbr || c.tasks) && rng() % 2) rcu_thread_offline(*c.domain);  // else exits online
}

struct retire_gp final : rcu_obj_base<retire_gp, void (*)(retire_gp*)> {
  std::atomic<bool>* done = nullptr;
};
inline void retire_gp_done(retire_gp* r) {
  r->done->store(true, std::memory_order_release);
  delete r;
}

// The writer's grace period, one of several ways.
inline void writer_grace_period(rcu_domain& d, std::minstd_rand& rng) {
  switch (rng() % 6) {
    case 0: {  // a callback, then a barrier
      std::atomic<bool> ran{false};
      rcu_call(d, [&ran] { ran = true; });
      rcu_barrier(d);
      break;
    }
    case 1: {  // a polling cookie (started), waited for by polling
      const rcu_cookie c = rcu_start_poll(d);
      while (!rcu_poll_done(d, c))
        std::this_thread::yield();
      break;
    }
    case 2: {  // a self-retiring object: its deleter runs after a grace period
      std::atomic<bool> done{false};
      auto* r = new retire_gp;
      r->done = &done;
      r->retire(&retire_gp_done, d);
      while (!done.load(std::memory_order_acquire))
        std::this_thread::yield();
      break;
    }
    default:
      rcu_synchronize(d);
      break;
  }
}

}  // namespace torture_detail

// Runs the torture on `domain` until `seconds` pass and `min_gps` grace periods have
// completed (but at most 20 x `seconds`), or (if stop_on_failure) a failure is seen.
// `readers` reader slots, each running reader threads one after another.
inline torture_result rcu_torture(rcu_domain& domain, double seconds, int readers = 2,
                                  bool stop_on_failure = false, std::uint64_t min_gps = 0) {
  using namespace torture_detail;
  std::vector<element> pool(4 * pipe_len);
  std::atomic<element*> current{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<bool> failure_seen{false};
  const std::string name = domain.name();
  const std::uint64_t gp0 = rcu_domain_stats(domain).gp_completed;
  const std::uint64_t t0 = now_ns();

  pool[0].mbtest = 1;
  pool[0].in_use = true;
  current.store(&pool[0]);

  std::vector<torture_result> per_slot(static_cast<std::size_t>(readers));
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {  // a reader slot: reader threads, one after another
      torture_result& total = per_slot[static_cast<std::size_t>(r)];
      for (unsigned life = 0; !stop.load(std::memory_order_relaxed); ++life) {
        reader_ctx c;
        c.domain = &domain;
        c.memb = name == "rcu";
        c.qsbr = name == "rcu_qsbr";
        c.tasks = name == "rcu_tasks";
        c.current = &current;
        std::thread([&] { reader_life(c, static_cast<unsigned>(r * 7919 + life), stop); }).join();
        total.add(c.res);
        ++total.reader_threads;
        if (stop_on_failure && total.failed()) failure_seen = true;
      }
    });
  }
  std::uint64_t updates = 0;
  threads.emplace_back([&] {  // the writer
    std::vector<element*> removed;
    std::minstd_rand rng(99);
    std::size_t next = 1;
    while (!stop.load(std::memory_order_relaxed)) {
      element* e = nullptr;
      for (std::size_t i = 0; i < pool.size() && !e; ++i, next = (next + 1) % pool.size()) {
        if (!pool[next].in_use) e = &pool[next];
      }
      if (e) {
        e->in_use = true;
        e->pipe.store(0, std::memory_order_relaxed);
        e->mbtest.store(1, std::memory_order_relaxed);
        removed.push_back(current.exchange(e, std::memory_order_acq_rel));
        ++updates;
      }
      writer_grace_period(domain, rng);
      for (auto it = removed.begin(); it != removed.end();) {
        element* old = *it;
        if (old->pipe.fetch_add(1, std::memory_order_acq_rel) + 1 >= pipe_len) {
          old->mbtest.store(0, std::memory_order_release);  // "freed"
          old->in_use = false;
          it = removed.erase(it);
        } else {
          ++it;
        }
      }
    }
  });
  std::atomic<std::uint64_t> fake{0}, poll_failures{0};
  for (int f = 0; f < 3; ++f) {
    threads.emplace_back([&, f] {  // fake writers
      std::minstd_rand rng(static_cast<unsigned>(1000 + f));
      while (!stop.load(std::memory_order_relaxed)) {
        switch (rng() % 4) {
          case 0:
            rcu_synchronize(domain);
            break;
          case 1:
            rcu_barrier(domain);
            break;
          case 2: {  // a cookie, polled until its grace period has passed
            const rcu_cookie c = rcu_get_cookie(domain);
            rcu_synchronize(domain);
            if (!rcu_poll_done(domain, c)) ++poll_failures;
            break;
          }
          default:
            rcu_call(domain, [] {});
            break;
        }
        ++fake;
      }
    });
  }
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  const std::uint64_t hard_end = now_ns() + static_cast<std::uint64_t>(20 * seconds * 1e9);
  auto more = [&] {
    const std::uint64_t now = now_ns();
    if (now >= hard_end) return false;
    return now < end || rcu_domain_stats(domain).gp_completed - gp0 < min_gps;
  };
  while (more() && !(stop_on_failure && failure_seen.load())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the run's length, not sync
  }
  stop = true;
  for (auto& t : threads)
    t.join();
  rcu_barrier(domain);

  torture_result total;
  for (const auto& r : per_slot) {
    total.add(r);
    total.reader_threads += r.reader_threads;
  }
  total.updates = updates;
  total.fake_writes = fake.load();
  total.poll_failures = poll_failures.load();
  total.grace_periods = rcu_domain_stats(domain).gp_completed - gp0;
  total.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  return total;
}

// Seconds per torture run: QUIESCE_TORTURE_SECONDS, or `fallback`.
inline double torture_seconds(double fallback) {
  const char* s = std::getenv("QUIESCE_TORTURE_SECONDS");
  return s ? std::max(0.1, std::atof(s)) : fallback;
}

}  // namespace quiesce::test
