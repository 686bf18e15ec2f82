// SPDX-License-Identifier: Apache-2.0
#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/keygcbench_format.hpp"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/cpu_set.hpp"
#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/trace.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::experiments {

nlohmann::json summary_json(const summary& s) {
  return {{"n", s.count()},
          {"min_ms", s.min() / 1e6},
          {"avg_ms", s.mean() / 1e6},
          {"max_ms", s.max() / 1e6},
          {"var_ms2", s.variance() / 1e12}};
}

void phase_latency::merge(const phase_latency& other) {
  probe.on.merge(other.probe.on);
  probe.others.merge(other.probe.others);
  if (probe.on.cpu < 0) probe.on.cpu = other.probe.on.cpu;
  reclaim_ns.merge(other.reclaim_ns);
}

nlohmann::json phase_latency::to_json() const {
  return {{"probe",
           {{"collector_cpu", probe.on.cpu},
            {"on_collector_cpu", summary_json(probe.on.late_ns)},
            {"other_cpus", summary_json(probe.others.late_ns)},
            {"overruns", probe.on.overruns + probe.others.overruns}}},
          {"reclaim", summary_json(reclaim_ns)}};
}

cyclic_probe make_keygc_probe(int priority) {
  return cyclic_probe(
      {.period = std::chrono::milliseconds(1), .cpus = {}, .fifo_priority = priority});
}

std::string probe_policy(const cyclic_probe& probe, int priority) {
  if (probe.realtime()) return fmt::format("SCHED_FIFO {}", priority);
  return priority > 0 ? "SCHED_OTHER (SCHED_FIFO not permitted)" : "SCHED_OTHER";
}

std::string phase_latency_lines(const phase_latency& unused, const phase_latency& expired,
                                const std::string& probe_policy) {
  std::string out = fmt::format(
      "cyclictest-style probe (wake-up lateness in ms; a pinned {} thread per CPU, absolute "
      "1 ms deadlines), the collector's CPU and the others:\n\n",
      probe_policy);
  for (auto [name, l] : {std::pair{"unused", &unused}, std::pair{"expired", &expired}}) {
    if (l->probe.on.late_ns.count() == 0 && l->probe.others.late_ns.count() == 0) continue;
    out +=
        keygcbench_line(fmt::format("{}/cpu{}", name, l->probe.on.cpu), l->probe.on.late_ns, 16) +
        "\n";
    out += keygcbench_line(fmt::format("{}/others", name), l->probe.others.late_ns, 16) + "\n";
  }
  out += "\nreclaim time (keys garbage -> all destroyed), ms:\n\n";
  for (auto [name, l] : {std::pair{"unused", &unused}, std::pair{"expired", &expired}}) {
    if (l->reclaim_ns.count() > 0) out += keygcbench_line(name, l->reclaim_ns, 16) + "\n";
  }
  return out;
}

namespace {

// A work item queued on the collector's CPU every millisecond (when not still pending),
// recording how long it waited to start: the lockup the patch is about.
class probe {
 public:
  // Records only while *recording is true (the measured phases).
  // Times in the series count from `t0_ns`.
  probe(int cpu, const std::atomic<int>& recording, std::uint64_t t0_ns)
      : cpu_(cpu), t0_ns_(t0_ns), recording_(recording) {
    thread_ = named_thread("keygc-probe", [this] { run(); });
  }
  ~probe() {
    stop_ = true;
    thread_.join();
    item_.cancel_sync();
  }
  histogram take() {
    std::lock_guard guard(lock_);
    return latency_;
  }
  std::vector<std::pair<double, double>> take_series() {
    std::lock_guard guard(lock_);
    return series_;
  }

 private:
  void run() {
    std::uint64_t next = now_ns();
    while (!stop_.load()) {
      next += 1'000'000;  // absolute 1 ms steps, as cyclictest
      const std::uint64_t now = now_ns();
      if (next > now) std::this_thread::sleep_for(std::chrono::nanoseconds(next - now));
      if (!item_.pending()) {
        queued_at_.store(now_ns(), std::memory_order_release);
        system_wq().queue_on(cpu_, item_);
      }
    }
  }
  void ran() {
    const std::uint64_t started = now_ns();
    const std::uint64_t waited = started - queued_at_.load(std::memory_order_acquire);
    if (recording_.load(std::memory_order_relaxed) == 0) return;
    // The probe's wait as a counter track beside the collector's executions.
    trace::emit({.ts_ns = started,
                 .name = "keygc probe: queue->start (us)",
                 .category = "keygc",
                 .num_key = "us",
                 .num_val = waited / 1000,
                 .ph = trace::phase::counter});
    std::lock_guard guard(lock_);
    latency_.record(waited);
    series_.emplace_back(static_cast<double>(started - t0_ns_) / 1e6,
                         static_cast<double>(waited) / 1e3);
  }

  const int cpu_;
  const std::uint64_t t0_ns_;
  const std::atomic<int>& recording_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> queued_at_{0};
  std::mutex lock_;
  histogram latency_;                              // L: lock_
  std::vector<std::pair<double, double>> series_;  // L: lock_
  work item_{"keygc_probe", [this](work&) { ran(); }};
  named_thread thread_;
};

// Builds `n` user keys in keyrings of `per` under the root keyring; returns the keyrings.
std::vector<keys::key_serial> populate(keys::key_store& store, std::size_t n, std::size_t per) {
  std::vector<keys::key_serial> rings;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % per == 0) rings.push_back(store.add_keyring(fmt::format("ring{}", rings.size())));
    store.add_key("user", fmt::format("key{}", i), "payload", rings.back());
  }
  return rings;
}

// The experiment's own thread (it populates, clears and waits) runs on the other CPUs
// while it drives a run, so that what holds the collector's CPU is the collector and the
// probes only: on the collector's CPU this thread took a whole tick from executions that
// ran 30 us of CPU, stretching them past 1 ms. Restored on the way out. Nothing changes
// when the collector's CPU is the only one.
class off_the_collector_cpu {
 public:
  explicit off_the_collector_cpu(int collector_cpu) : before_(cpu_set::current_affinity()) {
    cpu_set others;
    for (int cpu : before_)
      if (cpu != collector_cpu) others.insert(cpu);
    pinned_ = !others.empty() && others.size() < before_.size() && pin_this_thread(others);
  }
  ~off_the_collector_cpu() {
    if (pinned_) pin_this_thread(before_);
  }
  off_the_collector_cpu(const off_the_collector_cpu&) = delete;
  off_the_collector_cpu& operator=(const off_the_collector_cpu&) = delete;

 private:
  const cpu_set before_;
  bool pinned_ = false;
};

void one_run(const keygc_config& cfg, cyclic_probe& cyclic, std::uint64_t t0_ns,
             keygc_result& out) {
  const off_the_collector_cpu driver(cfg.cpu);
  std::atomic<int> phase{0};  // 0 setup, 1 unused, 2 expired
  std::mutex lock;
  summary unused, expired;
  std::vector<double> unused_exec, expired_exec;
  std::uint64_t executions = 0;
  keys::store_options opt;
  opt.mode = cfg.mode;
  opt.chunk = cfg.chunk;
  opt.slice = std::chrono::nanoseconds(static_cast<std::int64_t>(cfg.slice_us * 1000));
  opt.gc_delay = std::chrono::nanoseconds(0);
  opt.cpu = cfg.cpu;
  opt.on_execution = [&](const keys::gc_execution& ex) {
    std::lock_guard guard(lock);
    ++executions;
    const auto ns = static_cast<double>(ex.duration_ns);
    if (phase.load() == 1) {
      unused.add(ns);
      unused_exec.push_back(ns);
    }
    if (phase.load() == 2) {
      expired.add(ns);
      expired_exec.push_back(ns);
    }
  };
  keys::key_store store(opt);
  const std::size_t baseline_keys = store.live_keys();
  probe p(cfg.cpu, phase, t0_ns);

  // Phase "unused": every key loses its last reference.
  auto rings = populate(store, cfg.keys, cfg.per_keyring);
  store.gc_wait_idle();
  cyclic.begin_window();
  phase = 1;
  const std::uint64_t cleared_at = now_ns();
  for (auto r : rings)
    store.clear(r);
  while (store.live_keys() > baseline_keys + rings.size()) {
    store.gc_wait_idle();
    if (store.live_keys() > baseline_keys + rings.size()) store.gc_request();
  }
  phase_latency unused_latency;
  unused_latency.reclaim_ns.add(static_cast<double>(now_ns() - cleared_at));
  phase = 0;
  unused_latency.probe = split_lateness(cyclic.end_window(), cfg.cpu);

  // Phase "expired": timeouts set; the keys expire, their links are reaped, then the keys.
  const std::size_t with_rings = store.live_keys();
  auto rings2 = populate(store, cfg.keys, cfg.per_keyring);
  store.gc_wait_idle();
  cyclic.begin_window();
  phase = 2;
  const auto timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(cfg.timeout_ms * 1e6));
  for (auto r : rings2) {
    for (auto k : store.links(r))
      store.set_timeout(k, timeout);
  }
  const std::uint64_t all_expired_at = now_ns() + static_cast<std::uint64_t>(timeout.count());
  // The store's timer queues the collector once the first key expired (gc_delay 0).
  while (store.live_keys() > with_rings + rings2.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the experiment's pace
    store.gc_wait_idle();
  }
  phase_latency expired_latency;
  const std::uint64_t gone_at = now_ns();
  expired_latency.reclaim_ns.add(
      static_cast<double>(gone_at > all_expired_at ? gone_at - all_expired_at : 0));
  phase = 0;
  expired_latency.probe = split_lateness(cyclic.end_window(), cfg.cpu);

  std::lock_guard guard(lock);
  out.unused.merge(unused);
  out.expired.merge(expired);
  out.executions += executions;
  out.probe_ns.merge(p.take());
  out.unused_exec_ns.insert(out.unused_exec_ns.end(), unused_exec.begin(), unused_exec.end());
  out.expired_exec_ns.insert(out.expired_exec_ns.end(), expired_exec.begin(), expired_exec.end());
  const auto series = p.take_series();
  out.probe_series.insert(out.probe_series.end(), series.begin(), series.end());
  out.unused_latency.merge(unused_latency);
  out.expired_latency.merge(expired_latency);
}

}  // namespace

namespace {
nlohmann::json ms_list(const std::vector<double>& ns) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : ns)
    out.push_back(v / 1e6);
  return out;
}
}  // namespace

void keygc_result::merge(const keygc_result& o) {
  config.runs += o.config.runs;
  unused.merge(o.unused);
  expired.merge(o.expired);
  unused_latency.merge(o.unused_latency);
  expired_latency.merge(o.expired_latency);
  if (probe_policy.empty()) probe_policy = o.probe_policy;
  probe_ns.merge(o.probe_ns);
  hog_reports += o.hog_reports;
  executions += o.executions;
  unused_exec_ns.insert(unused_exec_ns.end(), o.unused_exec_ns.begin(), o.unused_exec_ns.end());
  expired_exec_ns.insert(expired_exec_ns.end(), o.expired_exec_ns.begin(), o.expired_exec_ns.end());
  const double offset = probe_series.empty() ? 0 : probe_series.back().first;
  for (auto [t, us] : o.probe_series)
    probe_series.emplace_back(offset + t, us);
}

summary keygc_result::combined() const {
  summary c = unused;
  c.merge(expired);
  return c;
}

nlohmann::json keygc_result::to_json() const {
  return {{"mode", keys::to_string(config.mode)},
          {"chunk", config.chunk},
          {"keys", config.keys},
          {"runs", config.runs},
          {"unused", summary_json(unused)},
          {"expired", summary_json(expired)},
          {"combined", summary_json(combined())},
          {"total_ms", total_ms()},
          {"executions", executions},
          {"probe_policy", probe_policy},
          {"unused_latency", unused_latency.to_json()},
          {"expired_latency", expired_latency.to_json()},
          {"hog_reports", hog_reports},
          {"executions_ms",
           {{"unused", ms_list(unused_exec_ns)}, {"expired", ms_list(expired_exec_ns)}}},
          {"probe_series", probe_series},
          {"probe",
           {{"n", probe_ns.count()},
            {"p50_us", static_cast<double>(probe_ns.percentile(50)) / 1e3},
            {"p99_us", static_cast<double>(probe_ns.percentile(99)) / 1e3},
            {"max_us", static_cast<double>(probe_ns.max()) / 1e3}}}};
}

keygc_result run_keygc(const keygc_config& config) {
  keygc_result r;
  r.config = config;
  if (r.config.cpu < 0) r.config.cpu = system_topology().cpus().cpus().back();
  log_capture capture(/*forward=*/false);  // hog reports are counted, not printed mid-table
  cyclic_probe cyclic = make_keygc_probe(config.probe_priority);
  r.probe_policy = probe_policy(cyclic, config.probe_priority);
  const std::uint64_t t0 = now_ns();
  for (int i = 0; i < config.runs; ++i)
    one_run(r.config, cyclic, t0, r);
  r.hog_reports = capture.count("hogged CPU");
  return r;
}

std::string keygc_lines(const keygc_result& r) {
  return keygcbench_line("unused", r.unused) + "\n" + keygcbench_line("expired", r.expired) + "\n" +
         keygcbench_line("combined", r.combined()) + "\n";
}

keygc_comparison compare(const keygc_result& base, const keygc_result& patched) {
  return {drop_pct(base.combined().variance(), patched.combined().variance()),
          -drop_pct(base.total_ms(), patched.total_ms()),
          drop_pct(static_cast<double>(base.probe_ns.max()),
                   static_cast<double>(patched.probe_ns.max()))};
}

}  // namespace quiesce::experiments
