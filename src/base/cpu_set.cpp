// SPDX-License-Identifier: Apache-2.0
#include "quiesce/cpu_set.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>
#include <string>

namespace quiesce {

namespace {

[[noreturn]] void bad_cpulist(std::string_view text, std::string_view why) {
  throw std::invalid_argument("cpulist: '" + std::string(text) + "': " + std::string(why));
}

// Parses a decimal CPU number at the front of `s`, advancing it.
int take_cpu(std::string_view& s, std::string_view whole) {
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) bad_cpulist(whole, "expected a CPU number");
  if (value < 0 || value >= CPU_SETSIZE) bad_cpulist(whole, "CPU number out of range");
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return value;
}

}  // namespace

cpu_set::cpu_set(std::initializer_list<int> cpus) {
  for (int cpu : cpus)
    insert(cpu);
}

cpu_set cpu_set::parse(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  cpu_set set;
  while (!s.empty()) {
    const int first = take_cpu(s, text);
    int last = first;
    if (!s.empty() && s.front() == '-') {
      s.remove_prefix(1);
      last = take_cpu(s, text);
      if (last < first) bad_cpulist(text, "descending range");
    }
    for (int cpu = first; cpu <= last; ++cpu)
      set.insert(cpu);
    if (s.empty()) break;
    if (s.front() != ',') bad_cpulist(text, "expected ',' or '-'");
    s.remove_prefix(1);
    if (s.empty()) bad_cpulist(text, "trailing ','");
  }
  return set;
}

cpu_set cpu_set::current_affinity() {
  cpu_set_t native;
  CPU_ZERO(&native);
  if (sched_getaffinity(0, sizeof(native), &native) != 0) {
    // Cannot happen for the calling thread with a full-size mask; be safe anyway.
    throw std::runtime_error("sched_getaffinity failed");
  }
  return from_native(native);
}

cpu_set cpu_set::from_native(const cpu_set_t& native) {
  cpu_set set;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &native)) set.cpus_.push_back(cpu);
  }
  return set;
}

cpu_set_t cpu_set::to_native() const {
  cpu_set_t native;
  CPU_ZERO(&native);
  for (int cpu : cpus_)
    CPU_SET(cpu, &native);
  return native;
}

std::string cpu_set::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < cpus_.size();) {
    std::size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1)
      ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) out += '-' + std::to_string(cpus_[j]);
    i = j + 1;
  }
  return out;
}

void cpu_set::insert(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) {
    throw std::invalid_argument("cpu: " + std::to_string(cpu) + " is outside [0, " +
                                std::to_string(CPU_SETSIZE) + ")");
  }
  const auto it = std::lower_bound(cpus_.begin(), cpus_.end(), cpu);
  if (it == cpus_.end() || *it != cpu) cpus_.insert(it, cpu);
}

bool cpu_set::contains(int cpu) const noexcept {
  return std::binary_search(cpus_.begin(), cpus_.end(), cpu);
}

cpu_set cpu_set::intersect(const cpu_set& other) const {
  cpu_set out;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                        std::back_inserter(out.cpus_));
  return out;
}

void require_cpu_in(const cpu_set& usable, int cpu, std::string_view what) {
  if (usable.contains(cpu)) return;
  throw std::invalid_argument(std::string(what) + ": " + std::to_string(cpu) +
                              " is not usable by this process (usable: " + usable.to_string() +
                              ")");
}

}  // namespace quiesce
