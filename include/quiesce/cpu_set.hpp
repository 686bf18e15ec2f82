// SPDX-License-Identifier: Apache-2.0
// quiesce/cpu_set.hpp - a set of CPU numbers, in the kernel's cpulist text format.
#pragma once

#include <sched.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce {

// An ordered set of CPU numbers (0 .. CPU_SETSIZE-1). A value type; not thread-safe to
// mutate concurrently, safe to read from many threads.
class cpu_set {
 public:
  cpu_set() = default;
  cpu_set(std::initializer_list<int> cpus);

  // Parses the kernel's cpulist format ("0-3,8,10-11", whitespace and a trailing newline
  // allowed; "" is the empty set). Throws std::invalid_argument naming the text on error.
  static cpu_set parse(std::string_view cpulist);
  // The CPUs the calling thread may run on (sched_getaffinity).
  static cpu_set current_affinity();
  static cpu_set from_native(const cpu_set_t& native);

  // The kernel's cpulist format, as printed by %*pbl ("0-3,8"); "" when empty.
  std::string to_string() const;
  cpu_set_t to_native() const;

  void insert(int cpu);  // throws std::invalid_argument if cpu is outside [0, CPU_SETSIZE)
  bool contains(int cpu) const noexcept;
  bool empty() const noexcept { return cpus_.empty(); }
  std::size_t size() const noexcept { return cpus_.size(); }
  int first() const noexcept { return cpus_.empty() ? -1 : cpus_.front(); }
  cpu_set intersect(const cpu_set& other) const;

  auto begin() const noexcept { return cpus_.begin(); }
  auto end() const noexcept { return cpus_.end(); }
  const std::vector<int>& cpus() const noexcept { return cpus_; }

  friend bool operator==(const cpu_set&, const cpu_set&) = default;

 private:
  std::vector<int> cpus_;  // sorted, unique
};

// Throws std::invalid_argument "WHAT: CPU is not usable by this process (usable: SET)"
// unless `usable` holds `cpu`: the one wording for a CPU the process cannot run on.
void require_cpu_in(const cpu_set& usable, int cpu, std::string_view what);

}  // namespace quiesce
