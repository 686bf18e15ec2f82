// SPDX-License-Identifier: Apache-2.0
// What this machine is and can do, as measured now: the context every result needs
// (`quiesce info`, the report's "Machine" section). Typed; JSON and Markdown are renderings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/verity.hpp"

namespace quiesce::experiments {

struct machine_facts {
  std::string kernel;     // "Linux 6.1.0-...", or "unknown"
  std::string cpu_model;  // /proc/cpuinfo's model name, or "unknown"
  std::string cpus;       // usable CPUs, a cpulist
  // CPU groups (cpulists) per affinity scope.
  std::vector<std::string> smt_groups, cache_groups, numa_groups;
  std::vector<std::string> topology_fallbacks;  // what the topology had to guess
  double clock_monotonic_ns = 0;                // cost of one read
  double clock_thread_cpu_ns = 0;
  double clock_stat_ns = 0;            // the runtime's statistics clock
  std::string clock_stat_source;       // "tsc" or "monotonic"
  std::optional<double> schedstat_ns;  // a kept-open sample; nullopt: no schedstat here
  bool may_raise_priority = false;     // a thread may take nice -20 (highpri workers)
  verity::sha256_choice sha256;        // the fs-verity block hashing chosen, and each variant

  nlohmann::json to_json() const;
  std::string markdown() const;  // a Markdown section body
};

// Kernel, CPU model, usable CPUs and their groups per affinity scope, clock costs,
// schedstat availability and cost, whether threads may raise their priority, SHA-256.
machine_facts measure_machine();

}  // namespace quiesce::experiments
