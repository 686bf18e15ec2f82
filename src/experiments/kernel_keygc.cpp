#include "quiesce/experiments/kernel_keygc.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <stdexcept>
#include <thread>

#include "quiesce/clock.hpp"
#include "quiesce/host/keyring.hpp"
#include "quiesce/host/kworker_time.hpp"
#include "quiesce/host/sysctl_override.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"

namespace quiesce::experiments {

using namespace quiesce::host;  // the keyring, kworker time, the gc_delay override

namespace {

constexpr const char* kGcDelay = "/proc/sys/kernel/keys/gc_delay";
constexpr std::uint64_t kReclaimTimeoutNs = 120'000'000'000;  // the kernel had 2 minutes

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
std::uint64_t wait_reclaimed(std::uint64_t target) {
  const std::uint64_t deadline = now_ns() + kReclaimTimeoutNs;
  while (kernel_keys_of_user() > target) {
    if (now_ns() > deadline) {
      throw std::runtime_error(fmt::format(
          "the kernel did not reclaim the keys within {} s ({} keys of this user remain, "
          "expected {})",
          kReclaimTimeoutNs / 1'000'000'000u, kernel_keys_of_user(), target));
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
  phase.collector_cpu = cpu;
  phase.kworker_ns.add(static_cast<double>(most));
}

std::string tag_for(int run, const char* phase) {
  return fmt::format("{}.{}{}", ::getpid(), phase, run);
}

void run_unused(const kernel_keygc_config& cfg, int run, cyclic_probe& probe, kernel_phase& out) {
  kernel_population pop({cfg.keys, cfg.per_keyring, 8, tag_for(run, "u")});
  const std::uint64_t target = kernel_keys_of_user() - cfg.keys;  // the keyrings stay
  const kworker_sample before = sample_kworkers();
  probe.begin_window();
  const std::uint64_t cleared_at = now_ns();
  on_cpu(cfg.cpu, [&] { pop.clear_keyrings(); });
  const std::uint64_t gone_at = wait_reclaimed(target);
  const auto window = close_window(probe);
  attribute_collector(out, before, cfg.cpu);
  phase_latency l;
  l.probe = split_lateness(window, out.collector_cpu);
  l.reclaim_ns.add(static_cast<double>(gone_at - cleared_at));
  out.latency.merge(l);
}

void run_expired(const kernel_keygc_config& cfg, unsigned gc_delay, int run, cyclic_probe& probe,
                 kernel_phase& out) {
  kernel_population pop({cfg.keys, cfg.per_keyring, 8, tag_for(run, "e")});
  const std::uint64_t target = kernel_keys_of_user() - cfg.keys;
  const kworker_sample before = sample_kworkers();
  probe.begin_window();
  const std::int64_t last_expiry = on_cpu(cfg.cpu, [&] { return pop.set_timeouts(cfg.timeout_s); });
  // The kernel's expiry and gc_delay are whole wall-clock seconds: every key may be
  // collected from (latest expiry + gc_delay) on.
  const std::uint64_t eligible_real_ns =
      static_cast<std::uint64_t>(last_expiry + static_cast<std::int64_t>(gc_delay)) *
      1'000'000'000u;
  const std::uint64_t gone_at = wait_reclaimed(target);
  const std::uint64_t gone_real_ns = realtime_ns() - (now_ns() - gone_at);
  const auto window = close_window(probe);
  attribute_collector(out, before, cfg.cpu);
  phase_latency l;
  l.probe = split_lateness(window, out.collector_cpu);
  l.reclaim_ns.add(
      static_cast<double>(gone_real_ns > eligible_real_ns ? gone_real_ns - eligible_real_ns : 0));
  out.latency.merge(l);
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
  j["kworker"] = summary_json(kworker_ns);
  return j;
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
      {"expired", expired.to_json()}};
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
    gc_delay.emplace(kGcDelay, std::to_string(*config.set_gc_delay));
  } else {
    r.expired.skipped = fmt::format(
        "the kernel reclaims expired keys only gc_delay ({} s) after they expire; run with "
        "--set-gc-delay SECONDS (root) to measure it",
        read_sysctl(kGcDelay));
  }
  cyclic_probe probe = make_keygc_probe(config.probe_priority);
  r.probe_policy = probe_policy(probe, config.probe_priority);
  for (int run = 0; run < config.runs; ++run) {
    run_unused(r.config, run, probe, r.unused);
    if (config.set_gc_delay) run_expired(r.config, *config.set_gc_delay, run, probe, r.expired);
  }
  return r;
}

std::string kernel_keygc_text(const kernel_keygc_result& r) {
  std::string out = fmt::format(
      "keygcbench results, the kernel's key_garbage_collector (Linux {}; {} keys in "
      "keyrings of {}, {} run{}):\n\n",
      r.kernel, r.config.keys, r.config.per_keyring, r.config.runs, r.config.runs == 1 ? "" : "s");
  for (auto [name, p] : {std::pair{"unused", &r.unused}, std::pair{"expired", &r.expired}}) {
    if (!p->skipped.empty()) {
      out += fmt::format("{}: skipped - {}\n", name, p->skipped);
      continue;
    }
    out +=
        fmt::format("{}: collector on CPU {} (its kworkers ran {:.1f} ms per run, max {:.1f} ms)\n",
                    name, p->collector_cpu, p->kworker_ns.mean() / 1e6, p->kworker_ns.max() / 1e6);
  }
  return out + "\n" + phase_latency_lines(r.unused.latency, r.expired.latency, r.probe_policy);
}

}  // namespace quiesce::experiments
