// SPDX-License-Identifier: Apache-2.0
#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygcbench_format.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <map>
#include <stdexcept>
#include <thread>

#include "quiesce/clock.hpp"
#include "quiesce/host/cyclictest.hpp"
#include "quiesce/host/kernel_trace.hpp"
#include "quiesce/host/keyring.hpp"
#include "quiesce/host/kworker_time.hpp"
#include "quiesce/host/sysctl_override.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"

namespace quiesce::experiments {

using namespace quiesce::host;  // the keyring, kworker time, the gc_delay override

namespace {

constexpr const char* gc_delay_sysctl = "/proc/sys/kernel/keys/gc_delay";
constexpr std::uint64_t reclaim_timeout_ns = 120'000'000'000;  // the kernel had 2 minutes

std::uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return timespec_to_ns(ts);
}

// Runs `fn` on this thread pinned to `cpu`, then gives the thread its CPUs back: the
// kernel queues key_gc_work on the CPU that dropped the last reference (or armed the timer).
template <typename Fn>
auto on_cpu(int cpu, Fn fn) {
  const cpu_set mine = cpu_set::current_affinity();
  if (!pin_this_thread(cpu_set{cpu})) {
    throw std::runtime_error(fmt::format("cannot run on CPU {}", cpu));
  }
  struct restore {
    const cpu_set& cpus;
    ~restore() { pin_this_thread(cpus); }
  } back{mine};
  return fn();
}

// Polls /proc/key-users (1 ms apart, from whichever CPU this thread gets) until the user's
// key count is at most `target`; returns when (CLOCK_MONOTONIC).
std::uint64_t wait_reclaimed(std::uint64_t target, const char* phase) {
  const std::uint64_t deadline = now_ns() + reclaim_timeout_ns;
  while (kernel_keys_of_user() > target) {
    if (now_ns() > deadline) {
      throw std::runtime_error(fmt::format(
          "{} phase: the kernel did not reclaim the keys within {} s ({} keys of this user "
          "remain, expected {})",
          phase, reclaim_timeout_ns / 1'000'000'000u, kernel_keys_of_user(), target));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return now_ns();
}

// Lets each probe wake at least twice after the phase, so a stall that ended just now is
// recorded, then closes the window.
std::vector<cpu_lateness> close_window(cyclic_probe& probe) {
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  return probe.end_window();
}

// cyclictest for a phase, if asked: started (and measuring) before the phase begins.
void start_cyclictest(const kernel_keygc_config& cfg, std::optional<cyclictest_run>& run) {
  if (!cfg.cyclictest) return;
  run.emplace(cfg.cpu, cfg.probe_priority);
  const std::uint64_t deadline = now_ns() + 10'000'000'000u;
  while (!run->measuring()) {
    if (now_ns() > deadline) throw std::runtime_error("cyclictest did not start within 10 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void stop_cyclictest(std::optional<cyclictest_run>& run, int cpu, kernel_phase& out) {
  if (!run) return;
  out.cyclictest_max_ns.add(static_cast<double>(run->stop()));
  out.cyclictest_cpu = cpu;
}

// The collector's executions of a phase that has just reclaimed its keys: every one that
// ended, waiting for one still running to end.
void collect_executions(workqueue_trace& trace, kernel_phase& phase) {
  const std::uint64_t deadline = now_ns() + reclaim_timeout_ns;
  std::map<int, std::uint64_t> per_cpu;
  for (;;) {
    for (const traced_execution& e : trace.take()) {
      phase.exec_ns.add(static_cast<double>(e.duration_ns()));
      phase.exec_ns_list.push_back(static_cast<double>(e.duration_ns()));
      per_cpu[e.cpu] += e.duration_ns();
    }
    if (!trace.running()) break;
    if (now_ns() > deadline) {
      throw std::runtime_error("the kernel's key_garbage_collector did not finish within 120 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::uint64_t most = 0;
  for (auto [cpu, ns] : per_cpu) {
    if (ns > most) {
      most = ns;
      phase.collector_cpu = cpu;
      phase.cpu_from_trace = true;
    }
  }
}

void attribute_collector(kernel_phase& phase, const kworker_sample& before, int trigger_cpu) {
  const auto gain = kworker_gain_per_cpu(before, sample_kworkers());
  int cpu = trigger_cpu;
  std::uint64_t most = 0;
  for (auto [c, ns] : gain) {
    if (ns > most) {
      most = ns;
      cpu = c;
    }
  }
  if (!phase.cpu_from_trace) phase.collector_cpu = cpu;
  phase.kworker_ns.add(static_cast<double>(most));
}

std::string tag_for(int run, const char* phase) {
  return fmt::format("{}.{}{}", ::getpid(), phase, run);
}

// One phase on a population of its own: the trace, cyclictest and the probe's window open,
// `make_garbage(pop)` runs on the collector's CPU, the keys' reclaim is awaited; then the
// phase's executions, the collector's CPU and the probe's lateness are recorded, and
// `reclaim_ns(garbage, began, gone_at)` - from what make_garbage returned, when it began
// and when the keys were gone (CLOCK_MONOTONIC) - is the phase's reclaim time.
template <typename Garbage, typename Reclaim>
void run_phase(const kernel_keygc_config& cfg, const char* phase, const std::string& tag,
               cyclic_probe& probe, workqueue_trace* trace, kernel_phase& out, Garbage make_garbage,
               Reclaim reclaim_ns) {
  kernel_population pop({cfg.keys, cfg.per_keyring, 8, tag});
  const std::uint64_t target = kernel_keys_of_user() - cfg.keys;  // the keyrings stay
  const kworker_sample before = sample_kworkers();
  if (trace) trace->take();  // executions before the phase are not its own
  std::optional<cyclictest_run> cyclic;
  start_cyclictest(cfg, cyclic);
  probe.begin_window();
  const std::uint64_t began = now_ns();
  const auto garbage = on_cpu(cfg.cpu, [&] { return make_garbage(pop); });
  const std::uint64_t gone_at = wait_reclaimed(target, phase);
  const std::uint64_t reclaimed_in = reclaim_ns(garbage, began, gone_at);
  const auto window = close_window(probe);
  stop_cyclictest(cyclic, cfg.cpu, out);
  if (trace) collect_executions(*trace, out);
  attribute_collector(out, before, cfg.cpu);
  phase_latency l;
  l.probe = split_lateness(window, out.collector_cpu);
  l.reclaim_ns.add(static_cast<double>(reclaimed_in));
  out.latency.merge(l);
}

// Unused keys: the keyrings are cleared; reclaim is from the clearing to the last key gone.
void run_unused(const kernel_keygc_config& cfg, int run, cyclic_probe& probe,
                workqueue_trace* trace, kernel_phase& out) {
  run_phase(
      cfg, "unused", tag_for(run, "u"), probe, trace, out,
      [](kernel_population& pop) {
        pop.clear_keyrings();
        return 0;
      },
      [](int, std::uint64_t cleared_at, std::uint64_t gone_at) { return gone_at - cleared_at; });
}

// Expired keys: each gets a timeout; reclaim is from the moment every key may be collected
// to the last key gone.
void run_expired(const kernel_keygc_config& cfg, unsigned gc_delay, int run, cyclic_probe& probe,
                 workqueue_trace* trace, kernel_phase& out) {
  run_phase(
      cfg, "expired", tag_for(run, "e"), probe, trace, out,
      [&](kernel_population& pop) { return pop.set_timeouts(cfg.timeout_s); },
      [&](std::int64_t last_expiry, std::uint64_t, std::uint64_t gone_at) -> std::uint64_t {
        // The kernel's expiry and gc_delay are whole wall-clock seconds: every key may be
        // collected from (latest expiry + gc_delay) on.
        const std::uint64_t eligible_real_ns =
            static_cast<std::uint64_t>(last_expiry + static_cast<std::int64_t>(gc_delay)) *
            1'000'000'000u;
        const std::uint64_t gone_real_ns = realtime_ns() - (now_ns() - gone_at);
        return gone_real_ns > eligible_real_ns ? gone_real_ns - eligible_real_ns : 0;
      });
}

std::string kernel_release() {
  utsname u{};
  return ::uname(&u) == 0 ? u.release : "unknown";
}

}  // namespace

nlohmann::json kernel_phase::to_json() const {
  if (!skipped.empty()) return {{"skipped", skipped}};
  nlohmann::json j = latency.to_json();
  j["collector_cpu"] = collector_cpu;
  j["collector_cpu_from"] = cpu_from_trace ? "tracepoints" : "kworker run time";
  j["kworker"] = summary_json(kworker_ns);
  if (cyclictest_cpu >= 0) {
    j["cyclictest"] = {{"cpu", cyclictest_cpu}, {"max", summary_json(cyclictest_max_ns)}};
  }
  if (exec_ns.count() > 0 || cpu_from_trace) {
    j["executions"] = summary_json(exec_ns);
    nlohmann::json ms = nlohmann::json::array();
    for (double ns : exec_ns_list)
      ms.push_back(ns / 1e6);
    j["executions_ms"] = std::move(ms);
  }
  return j;
}

summary kernel_keygc_result::combined() const {
  summary c = unused.exec_ns;
  c.merge(expired.exec_ns);
  return c;
}

nlohmann::json kernel_keygc_result::to_json() const {
  return {
      {"mode", "kernel"},
      {"kernel", kernel},
      {"keys", config.keys},
      {"per_keyring", config.per_keyring},
      {"runs", config.runs},
      {"gc_delay_s", config.set_gc_delay ? nlohmann::json(*config.set_gc_delay) : nlohmann::json()},
      {"unused", unused.to_json()},
      {"expired", expired.to_json()},
      {"tracing", traced() ? std::string("tracepoints") : untraced},
      {"lost_events", lost_events},
      {"combined", summary_json(combined())},
      {"total_ms", combined().sum() / 1e6}};
}

std::optional<std::string> kernel_keyring_unusable(std::size_t keys, std::size_t per_keyring) {
  try {
    population_shape shape{keys, per_keyring, 8, std::to_string(::getpid())};
    if (auto why = quota_refusal(shape, read_key_quota(), ::getuid())) return why;
    check_keyring_usable();
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

kernel_keygc_result run_kernel_keygc(const kernel_keygc_config& config) {
  kernel_keygc_result r;
  r.config = config;
  if (r.config.cpu < 0) r.config.cpu = system_topology().cpus().cpus().back();
  if (r.config.timeout_s == 0) r.config.timeout_s = 2 + static_cast<unsigned>(config.keys / 50'000);
  r.kernel = kernel_release();
  if (auto why = kernel_keyring_unusable(config.keys, config.per_keyring)) {
    throw std::runtime_error("the kernel keyring cannot be used: " + *why);
  }
  std::optional<sysctl_override> gc_delay;
  if (config.set_gc_delay) {
    gc_delay.emplace(gc_delay_sysctl, std::to_string(*config.set_gc_delay));
  } else {
    r.expired.skipped = fmt::format(
        "the kernel reclaims expired keys only gc_delay ({} s) after they expire; run with "
        "--set-gc-delay SECONDS (root) to measure it",
        read_sysctl(gc_delay_sysctl));
  }
  std::optional<workqueue_trace> trace;
  if (config.trace) {
    try {
      trace.emplace("key_garbage_collector");
    } catch (const std::exception& e) {
      r.untraced = e.what();
    }
  } else {
    r.untraced = "not asked";
  }
  workqueue_trace* t = trace ? &*trace : nullptr;
  cyclic_probe probe = make_keygc_probe(config.probe_priority);
  r.probe_policy = probe_policy(probe, config.probe_priority);
  for (int run = 0; run < config.runs; ++run) {
    run_unused(r.config, run, probe, t, r.unused);
    if (config.set_gc_delay) run_expired(r.config, *config.set_gc_delay, run, probe, t, r.expired);
  }
  if (trace) r.lost_events = trace->lost_events();
  return r;
}

std::string kernel_keygcbench_lines(const kernel_keygc_result& r) {
  if (!r.traced()) return {};
  std::string out;
  for (auto [name, p] : {std::pair{"unused", &r.unused}, std::pair{"expired", &r.expired}}) {
    out += p->skipped.empty() ? keygcbench_line(name, p->exec_ns) + "\n"
                              : fmt::format("{:<10}skipped\n", std::string(name) + ":");
  }
  out += keygcbench_line("combined", r.combined()) + "\n";
  return out + fmt::format("total task time: {:.3f} ms\n", r.combined().sum() / 1e6);
}

std::string kernel_keygc_text(const kernel_keygc_result& r) {
  std::string out = fmt::format(
      "keygcbench results, the kernel's key_garbage_collector (Linux {}; {} keys in "
      "keyrings of {}, {} run{}):\n\n",
      r.kernel, r.config.keys, r.config.per_keyring, r.config.runs, r.config.runs == 1 ? "" : "s");
  if (r.traced()) {
    out += fmt::format(
        "{} executions of key_garbage_collector, from the kernel's "
        "workqueue tracepoints{}:\n\n",
        r.combined().count(),
        r.lost_events ? fmt::format(" ({} events lost: some may be missing)", r.lost_events) : "");
    out += kernel_keygcbench_lines(r) + "\n";
  } else {
    out += fmt::format(
        "(no tracepoints: {}; the collector's CPU is inferred from kworker run "
        "time)\n\n",
        r.untraced);
  }
  for (auto [name, p] : {std::pair{"unused", &r.unused}, std::pair{"expired", &r.expired}}) {
    if (!p->skipped.empty()) {
      out += fmt::format("{}: skipped - {}\n", name, p->skipped);
      continue;
    }
    out += fmt::format(
        "{}: collector on CPU {} ({}; its kworkers ran {:.1f} ms per run, max {:.1f} ms)\n", name,
        p->collector_cpu, p->cpu_from_trace ? "from the tracepoints" : "from kworker run time",
        p->kworker_ns.mean() / 1e6, p->kworker_ns.max() / 1e6);
  }
  out += "\n" + phase_latency_lines(r.unused.latency, r.expired.latency, r.probe_policy);
  for (auto [name, p] : {std::pair{"unused", &r.unused}, std::pair{"expired", &r.expired}}) {
    if (p->cyclictest_cpu < 0) continue;
    const bool same = p->cyclictest_cpu == p->latency.probe.on.cpu;
    out += fmt::format(
        "{}: cyclictest (rt-tests) on CPU {}: max {:.3f} ms (largest of {} run{}); "
        "cyclic_probe on {}: max {:.3f} ms\n",
        name, p->cyclictest_cpu, p->cyclictest_max_ns.max() / 1e6, p->cyclictest_max_ns.count(),
        p->cyclictest_max_ns.count() == 1 ? "" : "s",
        same ? "the same CPU" : fmt::format("CPU {}", p->latency.probe.on.cpu),
        p->latency.probe.on.late_ns.max() / 1e6);
  }
  return out;
}

}  // namespace quiesce::experiments
