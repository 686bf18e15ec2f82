// rcutorture for quiesce's RCU domains (after kernel/rcu/rcutorture.c).
//
// A writer publishes elements from a pool; each removed element's pipe_count is advanced
// after every grace period, and at pipe_len its mbtest flag is cleared and the element
// returns to the pool (it is "freed"). Readers record, in the Reader Pipe histogram, the
// pipe_count of the element they see, and in the Reader Batch histogram how many grace
// periods started during their read. A reader that sees an element two grace periods after
// its removal (pipe bucket >= 2), or an element with mbtest == 0, is a FAILURE. Fake
// writers hammer rcu_synchronize, rcu_barrier and rcu_call meanwhile.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
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
  std::uint64_t reads = 0, updates = 0, mbtest_failures = 0, fake_writes = 0;

  bool failed() const {
    if (mbtest_failures) return true;
    for (std::size_t i = 2; i < pipe.size(); ++i) {
      if (pipe[i]) return true;
    }
    return false;
  }
  std::string report(const char* domain) const {
    std::ostringstream out;
    out << domain << ": " << (failed() ? "FAILURE" : "SUCCESS") << " reads=" << reads
        << " updates=" << updates << " fake_writes=" << fake_writes
        << " mbtest_failures=" << mbtest_failures << "\nReader Pipe:";
    for (auto v : pipe)
      out << ' ' << v;
    out << "\nReader Batch:";
    for (auto v : batch)
      out << ' ' << v;
    return out.str();
  }
};

// Runs the torture on `domain` until `seconds` pass or (if stop_on_failure) a failure is
// seen. Readers: `readers` threads; writers: one real, two fake.
inline torture_result rcu_torture(rcu_domain& domain, double seconds, int readers = 2,
                                  bool stop_on_failure = false) {
  struct element {
    std::atomic<int> pipe{0};
    std::atomic<int> mbtest{0};
    bool in_use = false;  // writer only
  };
  std::vector<element> pool(4 * pipe_len);
  std::atomic<element*> current{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<bool> failure_seen{false};
  const bool qsbr = std::string(domain.name()) == "rcu_qsbr";
  const bool tasks = std::string(domain.name()) == "rcu_tasks";

  pool[0].mbtest = 1;
  pool[0].in_use = true;
  current.store(&pool[0]);

  std::vector<torture_result> per_reader(static_cast<std::size_t>(readers));
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      torture_result& res = per_reader[static_cast<std::size_t>(r)];
      if (qsbr || tasks) rcu_thread_online(domain);
      std::minstd_rand rng(static_cast<unsigned>(r + 1));
      while (!stop.load(std::memory_order_relaxed)) {
        const std::uint64_t gp_before = rcu_get_cookie(domain).gp;
        domain.lock();
        element* p = current.load(std::memory_order_acquire);
        // Linger inside the section now and then, to widen the windows.
        if (rng() % 16 == 0) {
          for (int i = 0; i < 50; ++i)
            std::atomic_signal_fence(std::memory_order_seq_cst);
        }
        if (rng() % 64 == 0) std::this_thread::yield();
        if (p->mbtest.load(std::memory_order_acquire) == 0) ++res.mbtest_failures;
        int pc = p->pipe.load(std::memory_order_acquire);
        if (pc > pipe_len) pc = pipe_len;
        ++res.pipe[static_cast<std::size_t>(pc)];
        domain.unlock();
        const std::uint64_t gp_after = rcu_get_cookie(domain).gp;
        ++res.batch[std::min<std::size_t>(gp_after - gp_before, pipe_len + 1)];
        ++res.reads;
        if (qsbr) rcu_quiescent_state(domain);
        if (tasks) cond_resched_tasks_qs();
        if (stop_on_failure && res.failed()) failure_seen = true;
      }
      if (qsbr || tasks) rcu_thread_offline(domain);
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
      // One grace period, by synchronize or by a callback plus barrier.
      if (rng() % 4 == 0) {
        std::atomic<bool> ran{false};
        rcu_call(domain, [&ran] { ran = true; });
        rcu_barrier(domain);
      } else {
        rcu_synchronize(domain);
      }
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
  std::atomic<std::uint64_t> fake{0};
  for (int f = 0; f < 2; ++f) {
    threads.emplace_back([&, f] {  // fake writers
      std::minstd_rand rng(static_cast<unsigned>(1000 + f));
      while (!stop.load(std::memory_order_relaxed)) {
        switch (rng() % 3) {
          case 0:
            rcu_synchronize(domain);
            break;
          case 1:
            rcu_barrier(domain);
            break;
          default:
            rcu_call(domain, [] {});
            break;
        }
        ++fake;
      }
    });
  }
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  while (now_ns() < end && !(stop_on_failure && failure_seen.load())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the run's length, not sync
  }
  stop = true;
  for (auto& t : threads)
    t.join();
  rcu_barrier(domain);

  torture_result total;
  for (const auto& r : per_reader) {
    for (std::size_t i = 0; i < total.pipe.size(); ++i) {
      total.pipe[i] += r.pipe[i];
      total.batch[i] += r.batch[i];
    }
    total.reads += r.reads;
    total.mbtest_failures += r.mbtest_failures;
  }
  total.updates = updates;
  total.fake_writes = fake.load();
  return total;
}

// Seconds per torture run: QUIESCE_TORTURE_SECONDS, or `fallback`.
inline double torture_seconds(double fallback) {
  const char* s = std::getenv("QUIESCE_TORTURE_SECONDS");
  return s ? std::max(0.1, std::atof(s)) : fallback;
}

}  // namespace quiesce::test
