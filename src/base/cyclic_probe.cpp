// SPDX-License-Identifier: Apache-2.0
// The cyclictest-style probe: one pinned thread per CPU on absolute 1 ms deadlines.
#include "quiesce/cyclic_probe.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <stdexcept>
#include <system_error>

#include "mutex.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce {

namespace {

timespec to_timespec(std::uint64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000u), static_cast<long>(ns % 1'000'000'000u)};
}

}  // namespace

struct cyclic_probe::impl {
  struct per_cpu {
    int cpu = -1;
    detail::mutex lock{"cyclic_probe per_cpu lock"};
    cpu_lateness seen QUIESCE_GUARDED_BY(lock);
    named_thread thread;
  };

  std::uint64_t period_ns = 0;                   // I
  cpu_set cpus;                                  // I
  std::atomic<bool> stop{false};                 // A: set once, by the destructor
  std::atomic<bool> recording{false};            // A: begin_window / end_window
  std::vector<std::unique_ptr<per_cpu>> probes;  // I after the constructor

  mutable detail::mutex start_lock{"cyclic_probe start_lock"};
  int started QUIESCE_GUARDED_BY(start_lock) = 0;  // threads pinned and running
  int pin_failures QUIESCE_GUARDED_BY(start_lock) = 0;
  int fifo_threads QUIESCE_GUARDED_BY(start_lock) = 0;  // threads that run SCHED_FIFO
  int fifo_priority = 0;                                // I
  std::condition_variable start_cv;

  void run(per_cpu& p) {
    const bool pinned = pin_this_thread(cpu_set{p.cpu});
    bool fifo = false;
    if (fifo_priority > 0) {
      sched_param sp{};
      sp.sched_priority = fifo_priority;
      fifo = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
    }
    {
      detail::lock_guard g(start_lock);
      ++started;
      if (!pinned) ++pin_failures;
      if (fifo) ++fifo_threads;
    }
    start_cv.notify_all();
    if (!pinned) return;
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    std::uint64_t deadline = timespec_to_ns(ts) + period_ns;
    while (!stop.load(std::memory_order_relaxed)) {
      const timespec until = to_timespec(deadline);
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
      }
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const std::uint64_t woke = timespec_to_ns(ts);
      const std::uint64_t late = woke > deadline ? woke - deadline : 0;
      std::uint64_t skipped = 0;
      deadline += period_ns;
      while (deadline <= woke) {  // missed whole periods: do not replay them
        deadline += period_ns;
        ++skipped;
      }
      if (recording.load(std::memory_order_relaxed)) {
        detail::lock_guard g(p.lock);
        p.seen.late_ns.add(static_cast<double>(late));
        p.seen.late_hist_ns.record(late);
        p.seen.overruns += skipped;
      }
    }
  }
};

cyclic_probe::cyclic_probe(cyclic_probe_options options) : impl_(std::make_unique<impl>()) {
  impl& m = *impl_;
  if (options.period.count() <= 0)
    throw std::invalid_argument("cyclic_probe: period must be positive");
  m.period_ns = static_cast<std::uint64_t>(options.period.count());
  if (options.fifo_priority < 0 || options.fifo_priority > 99) {
    throw std::invalid_argument("cyclic_probe: fifo_priority must be 0..99");
  }
  m.fifo_priority = options.fifo_priority;
  const cpu_set usable = cpu_set::current_affinity();
  m.cpus = options.cpus.empty() ? usable : options.cpus;
  for (int cpu : m.cpus)
    require_cpu_in(usable, cpu, "cyclic_probe: cpu");
  for (int cpu : m.cpus) {
    auto p = std::make_unique<impl::per_cpu>();
    p->cpu = cpu;
    p->seen.cpu = cpu;
    m.probes.push_back(std::move(p));
  }
  for (auto& p : m.probes) {
    impl::per_cpu* raw = p.get();
    raw->thread = named_thread(fmt::format("cyclic/{}", raw->cpu), [&m, raw] { m.run(*raw); });
  }
  detail::unique_lock g(m.start_lock);
  while (m.started != static_cast<int>(m.probes.size()))
    g.wait(m.start_cv);
  if (m.pin_failures > 0) {
    g.unlock();
    m.stop = true;
    m.probes.clear();  // joins
    throw std::system_error(EINVAL, std::generic_category(),
                            "cyclic_probe: cannot pin a probe thread to its CPU");
  }
}

cyclic_probe::~cyclic_probe() {
  impl_->stop = true;
  impl_->probes.clear();  // joins: each thread wakes within a period
}

void cyclic_probe::begin_window() {
  for (auto& p : impl_->probes) {
    detail::lock_guard g(p->lock);
    p->seen = cpu_lateness{};
    p->seen.cpu = p->cpu;
  }
  impl_->recording = true;
}

std::vector<cpu_lateness> cyclic_probe::end_window() {
  impl_->recording = false;
  std::vector<cpu_lateness> out;
  for (auto& p : impl_->probes) {
    detail::lock_guard g(p->lock);
    out.push_back(p->seen);
  }
  return out;
}

std::uint64_t cyclic_probe::samples() const {
  std::uint64_t n = 0;
  for (auto& p : impl_->probes) {
    detail::lock_guard g(p->lock);
    n += p->seen.late_ns.count();
  }
  return n;
}

std::uint64_t cyclic_probe::samples(int cpu) const {
  for (auto& p : impl_->probes) {
    if (p->cpu != cpu) continue;
    detail::lock_guard g(p->lock);
    return p->seen.late_ns.count();
  }
  return 0;
}

const cpu_set& cyclic_probe::cpus() const noexcept {
  return impl_->cpus;
}

bool cyclic_probe::realtime() const noexcept {
  detail::lock_guard g(impl_->start_lock);
  return impl_->fifo_priority > 0 && impl_->fifo_threads == static_cast<int>(impl_->probes.size());
}

void cpu_lateness::merge(const cpu_lateness& other) noexcept {
  late_ns.merge(other.late_ns);
  late_hist_ns.merge(other.late_hist_ns);
  overruns += other.overruns;
}

lateness_split split_lateness(const std::vector<cpu_lateness>& window, int cpu) {
  lateness_split s;
  s.on.cpu = cpu;
  for (const cpu_lateness& c : window) {
    (c.cpu == cpu ? s.on : s.others).merge(c);
  }
  return s;
}

}  // namespace quiesce
