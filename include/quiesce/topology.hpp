// SPDX-License-Identifier: Apache-2.0
// quiesce/topology.hpp - the CPUs this process may use, and how they are grouped.
//
// Read from sysfs (/sys/devices/system/cpu and /sys/devices/system/node), restricted to the
// process's affinity mask, the way the kernel's workqueue builds its unbound affinity
// scopes (cpu, smt, cache, numa, system).
#pragma once

#include <filesystem>
#include <vector>

#include "quiesce/cpu_set.hpp"

namespace quiesce {

// How widely an unbound worker may roam (the kernel's wq_affn_scope, 6.5+): one pool per
// CPU, per SMT core, per last-level cache, per NUMA node, or one for the whole system.
enum class affinity_scope { cpu, smt, cache, numa, system };

const char* to_string(affinity_scope scope) noexcept;

// A snapshot of the CPU topology. A value type: build it once, share it read-only.
//
// Missing sysfs files are tolerated, each with a stated fallback:
//   cpu/online missing              -> the affinity mask alone decides which CPUs exist
//   cpuN/topology/*siblings* missing -> each CPU is its own SMT core
//   cpuN/cache missing               -> the CPUs of the same NUMA node share a cache
//   node/ missing                    -> every CPU is on node 0
// `fallbacks()` lists which ones were taken, in words, for reports.
class cpu_topology {
 public:
  // Reads `sysfs_root` (normally "/sys"), keeping only CPUs in `allowed`. Throws
  // std::invalid_argument if no CPU is both online and allowed.
  static cpu_topology read(const std::filesystem::path& sysfs_root, const cpu_set& allowed);

  // The CPUs usable by this process: online and in its affinity mask.
  const cpu_set& cpus() const noexcept { return cpus_; }

  // The partition of cpus() into groups of the given scope, ordered by first CPU.
  // Every usable CPU is in exactly one group of each scope.
  const std::vector<cpu_set>& groups(affinity_scope scope) const noexcept;
  // The group of `scope` that holds `cpu`; throws std::invalid_argument if cpu is not usable.
  const cpu_set& group_of(affinity_scope scope, int cpu) const;
  // The NUMA node of a usable CPU (0 when the machine reports no nodes).
  int node_of(int cpu) const;

  const std::vector<std::string>& fallbacks() const noexcept { return fallbacks_; }

 private:
  cpu_set cpus_;
  std::vector<cpu_set> groups_[5];      // indexed by affinity_scope
  std::vector<int> node_ids_;           // node number of groups_[numa][i]
  std::vector<std::string> fallbacks_;  // sysfs files missing and what was assumed instead
};

// The topology of this machine for this process (read once, on first use, from /sys and
// the affinity mask at that moment). Thread-safe.
const cpu_topology& system_topology();

}  // namespace quiesce
