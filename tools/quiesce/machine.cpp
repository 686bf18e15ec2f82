// SPDX-License-Identifier: Apache-2.0
#include "machine.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <fstream>
#include <string>

#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/verity.hpp"

namespace quiesce::cli {

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

// Median cost of a schedstat sample on a kept-open file, in ns; -1 if unavailable.
double schedstat_cost_ns() {
  schedstat_reader reader;
  if (!reader.available()) return -1;
  constexpr int reads = 200;
  const std::uint64_t start = now_ns();
  for (int i = 0; i < reads; ++i) {
    if (!reader.sample()) return -1;
  }
  return static_cast<double>(now_ns() - start) / reads;
}

}  // namespace

nlohmann::json machine_facts() {
  nlohmann::json facts;
  utsname uts{};
  if (::uname(&uts) == 0) facts["kernel"] = std::string(uts.sysname) + " " + uts.release;
  facts["cpu_model"] = cpu_model();
  const cpu_topology& topo = system_topology();
  facts["cpus"] = topo.cpus().to_string();
  nlohmann::json scopes;
  for (auto scope : {affinity_scope::smt, affinity_scope::cache, affinity_scope::numa}) {
    nlohmann::json groups = nlohmann::json::array();
    for (const cpu_set& g : topo.groups(scope))
      groups.push_back(g.to_string());
    scopes[to_string(scope)] = groups;
  }
  facts["groups"] = scopes;
  facts["topology_fallbacks"] = topo.fallbacks();
  const clock_cost cost = measure_clock_cost();
  facts["clock_monotonic_ns"] = cost.monotonic_ns;
  facts["clock_thread_cpu_ns"] = cost.thread_cpu_ns;
  facts["clock_stat_ns"] = cost.stat_ns;
  facts["clock_stat_source"] = stat_clock_is_tsc() ? "tsc" : "monotonic";
  const double sched_ns = schedstat_cost_ns();
  facts["schedstat"] = sched_ns < 0 ? nlohmann::json("unavailable") : nlohmann::json(sched_ns);
  facts["may_raise_priority"] = may_raise_priority();
  const verity::sha256_choice& sha = verity::sha256_hashing();
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : sha.rows) {
    rows.push_back(
        {{"name", r.name}, {"lanes", r.lanes}, {"mb_per_s", r.mb_per_s}, {"not_here", r.not_here}});
  }
  facts["sha256"] = {{"chosen", sha.chosen}, {"why", sha.why}, {"variants", rows}};
  return facts;
}

std::string machine_markdown(const nlohmann::json& f) {
  std::string md;
  md += fmt::format("- kernel: {}\n", f.value("kernel", "unknown"));
  md += fmt::format("- CPU: {}\n", f["cpu_model"].get<std::string>());
  md += fmt::format("- usable CPUs: {}\n", f["cpus"].get<std::string>());
  for (const char* scope : {"smt", "cache", "numa"}) {
    std::string groups;
    for (const auto& g : f["groups"][scope]) {
      groups += (groups.empty() ? "" : " | ") + g.get<std::string>();
    }
    md += fmt::format("- {} groups: {}\n", scope, groups);
  }
  for (const auto& fb : f["topology_fallbacks"]) {
    md += fmt::format("- topology fallback: {}\n", fb.get<std::string>());
  }
  md += fmt::format(
      "- clock read: monotonic {:.1f} ns, thread CPU time {:.1f} ns, runtime stats ({}) {:.1f} "
      "ns\n",
      f["clock_monotonic_ns"].get<double>(), f["clock_thread_cpu_ns"].get<double>(),
      f.value("clock_stat_source", "?"), f.value("clock_stat_ns", 0.0));
  if (f["schedstat"].is_number()) {
    md += fmt::format("- schedstat sample (kept-open pread): {:.0f} ns\n",
                      f["schedstat"].get<double>());
  } else {
    md += "- schedstat: unavailable (no /proc/self/task/TID/schedstat)\n";
  }
  md += fmt::format("- threads may raise priority (nice -20): {}\n",
                    f["may_raise_priority"].get<bool>() ? "yes" : "no");
  if (f.contains("sha256")) {
    const nlohmann::json& sha = f["sha256"];
    std::string speeds, absent;
    for (const auto& r : sha["variants"]) {
      const std::string name = r["name"].get<std::string>();
      if (r["mb_per_s"].get<double>() > 0) {
        speeds += fmt::format("{}{} {:.0f}", speeds.empty() ? "" : ", ", name,
                              r["mb_per_s"].get<double>());
      } else {
        absent += fmt::format("{}{} ({})", absent.empty() ? "" : ", ", name,
                              r["not_here"].get<std::string>());
      }
    }
    md += fmt::format("- SHA-256 for fs-verity blocks: {} ({}); MB/s per core on 4 KiB: {}\n",
                      sha["chosen"].get<std::string>(), sha["why"].get<std::string>(), speeds);
    if (!absent.empty()) md += fmt::format("- SHA-256 kernels this CPU cannot run: {}\n", absent);
  }
  return md;
}

}  // namespace quiesce::cli
