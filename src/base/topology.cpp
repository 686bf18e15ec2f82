// SPDX-License-Identifier: Apache-2.0
#include "quiesce/topology.hpp"
#include "file_io.hpp"

#include "never_destroyed.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace quiesce {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_text(const fs::path& file) {
  try {
    return read_file(file);
  } catch (const std::system_error&) {
    return std::nullopt;  // missing: the caller falls back
  }
}

// A cpulist file, or nullopt if it is missing or malformed.
std::optional<cpu_set> read_cpulist(const fs::path& file) {
  const auto text = read_text(file);
  if (!text) return std::nullopt;
  try {
    return cpu_set::parse(*text);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

// The CPUs sharing the last-level cache with cpuN: the highest-level data or unified
// cache under cpuN/cache/indexK.
std::optional<cpu_set> read_llc(const fs::path& cpu_dir) {
  std::error_code ec;
  fs::directory_iterator it(cpu_dir / "cache", ec);
  if (ec) return std::nullopt;
  int best_level = -1;
  std::optional<cpu_set> best;
  for (const fs::directory_entry& entry : it) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const auto type = read_text(entry.path() / "type");
    const auto level = read_text(entry.path() / "level");
    if (!type || !level || trimmed(*type) == "Instruction") continue;
    int lvl = 0;
    try {
      lvl = std::stoi(*level);
    } catch (const std::exception&) {
      continue;
    }
    const auto shared = read_cpulist(entry.path() / "shared_cpu_list");
    if (shared && lvl > best_level) {
      best_level = lvl;
      best = shared;
    }
  }
  return best;
}

// Partitions `cpus` using each CPU's reported group (`group_of`), robust against
// inconsistent reports: a CPU joins the first group that claims it.
std::vector<cpu_set> partition(const cpu_set& cpus, const std::map<int, cpu_set>& group_of) {
  std::vector<cpu_set> groups;
  cpu_set assigned;
  for (int cpu : cpus) {
    if (assigned.contains(cpu)) continue;
    cpu_set group{cpu};
    if (const auto it = group_of.find(cpu); it != group_of.end()) {
      for (int other : it->second) {
        if (cpus.contains(other) && !assigned.contains(other)) group.insert(other);
      }
    }
    for (int member : group)
      assigned.insert(member);
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

const char* to_string(affinity_scope scope) noexcept {
  switch (scope) {
    case affinity_scope::cpu:
      return "cpu";
    case affinity_scope::smt:
      return "smt";
    case affinity_scope::cache:
      return "cache";
    case affinity_scope::numa:
      return "numa";
    case affinity_scope::system:
      return "system";
  }
  return "?";
}

cpu_topology cpu_topology::read(const fs::path& sysfs_root, const cpu_set& allowed) {
  cpu_topology topo;
  const fs::path cpu_root = sysfs_root / "devices/system/cpu";
  const fs::path node_root = sysfs_root / "devices/system/node";

  if (const auto online = read_cpulist(cpu_root / "online")) {
    topo.cpus_ = online->intersect(allowed);
  } else {
    topo.cpus_ = allowed;
    topo.fallbacks_.push_back("cpu/online missing: every CPU of the affinity mask is online");
  }
  if (topo.cpus_.empty()) {
    throw std::invalid_argument("topology: no CPU is both online and in the affinity mask (" +
                                allowed.to_string() + ")");
  }

  // NUMA nodes: node/nodeK/cpulist.
  std::map<int, int> node_by_cpu;
  if (const auto nodes = read_cpulist(node_root / "online")) {
    for (int node : *nodes) {
      const auto members = read_cpulist(node_root / ("node" + std::to_string(node)) / "cpulist");
      if (!members) continue;
      for (int cpu : *members) {
        node_by_cpu.emplace(cpu, node);
      }
    }
  } else {
    topo.fallbacks_.push_back("node/online missing: every CPU is on node 0");
  }

  std::map<int, cpu_set> smt_group, llc_group;
  bool smt_missing = false, llc_missing = false, node_missing = false;
  const bool have_nodes = !node_by_cpu.empty();
  for (int cpu : topo.cpus_) {
    const fs::path dir = cpu_root / ("cpu" + std::to_string(cpu));
    auto siblings = read_cpulist(dir / "topology/core_cpus_list");
    if (!siblings) siblings = read_cpulist(dir / "topology/thread_siblings_list");
    if (siblings) {
      smt_group.emplace(cpu, *siblings);
    } else {
      smt_missing = true;
    }
    if (auto llc = read_llc(dir)) {
      llc_group.emplace(cpu, *llc);
    } else {
      llc_missing = true;
    }
    if (!node_by_cpu.count(cpu)) {
      node_missing = node_missing || have_nodes;
      node_by_cpu.emplace(cpu, 0);
    }
  }
  if (smt_missing) {
    topo.fallbacks_.push_back("cpuN/topology missing: such CPUs are their own SMT core");
  }
  if (node_missing) topo.fallbacks_.push_back("a CPU is in no node: it is put on node 0");

  // NUMA groups by node number (CPUs assigned to node 0 by fallback join node 0's group).
  std::map<int, cpu_set> by_node;
  for (int cpu : topo.cpus_)
    by_node[node_by_cpu.at(cpu)].insert(cpu);
  for (const auto& [node, members] : by_node) {
    topo.groups_[static_cast<int>(affinity_scope::numa)].push_back(members);
    topo.node_ids_.push_back(node);
  }
  std::sort(topo.groups_[static_cast<int>(affinity_scope::numa)].begin(),
            topo.groups_[static_cast<int>(affinity_scope::numa)].end(),
            [](const cpu_set& a, const cpu_set& b) { return a.first() < b.first(); });
  {
    // Keep node_ids_ aligned with the sorted groups.
    topo.node_ids_.clear();
    for (const cpu_set& g : topo.groups_[static_cast<int>(affinity_scope::numa)]) {
      topo.node_ids_.push_back(node_by_cpu.at(g.first()));
    }
  }

  if (llc_missing) {
    topo.fallbacks_.push_back("cpuN/cache missing: CPUs of one NUMA node share a cache");
    for (int cpu : topo.cpus_) {
      if (!llc_group.count(cpu)) llc_group.emplace(cpu, by_node.at(node_by_cpu.at(cpu)));
    }
  }

  for (int cpu : topo.cpus_) {
    topo.groups_[static_cast<int>(affinity_scope::cpu)].push_back(cpu_set{cpu});
  }
  topo.groups_[static_cast<int>(affinity_scope::smt)] = partition(topo.cpus_, smt_group);
  topo.groups_[static_cast<int>(affinity_scope::cache)] = partition(topo.cpus_, llc_group);
  topo.groups_[static_cast<int>(affinity_scope::system)].push_back(topo.cpus_);
  return topo;
}

const std::vector<cpu_set>& cpu_topology::groups(affinity_scope scope) const noexcept {
  return groups_[static_cast<int>(scope)];
}

const cpu_set& cpu_topology::group_of(affinity_scope scope, int cpu) const {
  for (const cpu_set& group : groups(scope)) {
    if (group.contains(cpu)) return group;
  }
  require_cpu_in(cpus_, cpu, "cpu");
  throw std::logic_error("cpu_topology: a usable CPU in no group");
}

int cpu_topology::node_of(int cpu) const {
  const auto& numa = groups_[static_cast<int>(affinity_scope::numa)];
  for (std::size_t i = 0; i < numa.size(); ++i) {
    if (numa[i].contains(cpu)) return node_ids_[i];
  }
  require_cpu_in(cpus_, cpu, "cpu");
  throw std::logic_error("cpu_topology: a usable CPU in no NUMA group");
}

// Never destroyed: workers and the timer read it until the process ends.
const cpu_topology& system_topology() {
  static detail::never_destroyed<cpu_topology> topo(
      cpu_topology::read("/sys", cpu_set::current_affinity()));
  return topo.get();
}

}  // namespace quiesce
