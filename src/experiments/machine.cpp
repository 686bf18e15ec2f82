// SPDX-License-Identifier: Apache-2.0
// Measures the machine's facts (machine.hpp) and renders them.
#include "quiesce/experiments/machine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/utsname.h>

#include <fstream>
#include <string>

#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/verity.hpp"

namespace quiesce::experiments {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// Whether a thread may take nice -20 (what highpri workers ask for). Tried on a throwaway
// thread, with the once-only refusal notice captured rather than printed.
bool may_raise_priority() {
  log_capture quiet;
  bool ok = false;
  named_thread probe("quiesce-nice", [&ok] { ok = set_this_thread_nice(-20); });
  probe.join();
  return ok;
}

// Mean cost of a schedstat sample on a kept-open file, in ns; nullopt if unavailable.
std::optional<double> schedstat_cost_ns() {
  schedstat_reader reader;
  if (!reader.available()) return std::nullopt;
  constexpr int reads = 200;
  const std::uint64_t start = now_ns();
  for (int i = 0; i < reads; ++i) {
    if (!reader.sample()) return std::nullopt;
  }
  return static_cast<double>(now_ns() - start) / reads;
}

}  // namespace

machine_facts measure_machine() {
  machine_facts f;
  utsname uts{};
  f.kernel = ::uname(&uts) == 0 ? std::string(uts.sysname) + " " + uts.release : "unknown";
  f.cpu_model = cpu_model();
  const cpu_topology& topo = system_topology();
  f.cpus = topo.cpus().to_string();
  for (auto [scope, groups] : {std::pair{affinity_scope::smt, &f.smt_groups},
                               std::pair{affinity_scope::cache, &f.cache_groups},
                               std::pair{affinity_scope::numa, &f.numa_groups}}) {
    for (const cpu_set& g : topo.groups(scope))
      groups->push_back(g.to_string());
  }
  f.topology_fallbacks = topo.fallbacks();
  const clock_cost cost = measure_clock_cost();
  f.clock_monotonic_ns = cost.monotonic_ns;
  f.clock_thread_cpu_ns = cost.thread_cpu_ns;
  f.clock_stat_ns = cost.stat_ns;
  f.clock_stat_source = stat_clock_is_tsc() ? "tsc" : "monotonic";
  f.schedstat_ns = schedstat_cost_ns();
  f.may_raise_priority = may_raise_priority();
  f.sha256 = verity::sha256_hashing();
  return f;
}

nlohmann::json machine_facts::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : sha256.rows) {
    rows.push_back(
        {{"name", r.name}, {"lanes", r.lanes}, {"mb_per_s", r.mb_per_s}, {"not_here", r.not_here}});
  }
  return {
      {"kernel", kernel},
      {"cpu_model", cpu_model},
      {"cpus", cpus},
      {"groups", {{"smt", smt_groups}, {"cache", cache_groups}, {"numa", numa_groups}}},
      {"topology_fallbacks", topology_fallbacks},
      {"clock_monotonic_ns", clock_monotonic_ns},
      {"clock_thread_cpu_ns", clock_thread_cpu_ns},
      {"clock_stat_ns", clock_stat_ns},
      {"clock_stat_source", clock_stat_source},
      {"schedstat", schedstat_ns ? nlohmann::json(*schedstat_ns) : nlohmann::json("unavailable")},
      {"may_raise_priority", may_raise_priority},
      {"sha256", {{"chosen", sha256.chosen}, {"why", sha256.why}, {"variants", rows}}}};
}

std::string machine_facts::markdown() const {
  std::string md;
  md += fmt::format("- kernel: {}\n", kernel);
  md += fmt::format("- CPU: {}\n", cpu_model);
  md += fmt::format("- usable CPUs: {}\n", cpus);
  for (auto [scope, groups] : {std::pair{"smt", &smt_groups}, std::pair{"cache", &cache_groups},
                               std::pair{"numa", &numa_groups}}) {
    md += fmt::format("- {} groups: {}\n", scope, fmt::join(*groups, " | "));
  }
  for (const std::string& fb : topology_fallbacks)
    md += fmt::format("- topology fallback: {}\n", fb);
  md += fmt::format(
      "- clock read: monotonic {:.1f} ns, thread CPU time {:.1f} ns, runtime stats ({}) {:.1f} "
      "ns\n",
      clock_monotonic_ns, clock_thread_cpu_ns, clock_stat_source, clock_stat_ns);
  if (schedstat_ns) {
    md += fmt::format("- schedstat sample (kept-open pread): {:.0f} ns\n", *schedstat_ns);
  } else {
    md += "- schedstat: unavailable (no /proc/self/task/TID/schedstat)\n";
  }
  md += fmt::format("- threads may raise priority (nice -20): {}\n",
                    may_raise_priority ? "yes" : "no");
  std::string speeds, absent;
  for (const auto& r : sha256.rows) {
    if (r.mb_per_s > 0) {
      speeds += fmt::format("{}{} {:.0f}", speeds.empty() ? "" : ", ", r.name, r.mb_per_s);
    } else {
      absent += fmt::format("{}{} ({})", absent.empty() ? "" : ", ", r.name, r.not_here);
    }
  }
  md += fmt::format("- SHA-256 for fs-verity blocks: {} ({}); MB/s per core on 4 KiB: {}\n",
                    sha256.chosen, sha256.why, speeds);
  if (!absent.empty()) md += fmt::format("- SHA-256 kernels this CPU cannot run: {}\n", absent);
  return md;
}

}  // namespace quiesce::experiments
