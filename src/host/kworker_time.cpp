// SPDX-License-Identifier: Apache-2.0
#include "quiesce/host/kworker_time.hpp"

#include <dirent.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string>

namespace quiesce::host {

std::optional<int> kworker_cpu(std::string_view comm) {
  constexpr std::string_view prefix = "kworker/";
  if (comm.substr(0, prefix.size()) != prefix) return std::nullopt;
  comm.remove_prefix(prefix.size());
  int cpu = -1;
  const auto [end, ec] = std::from_chars(comm.data(), comm.data() + comm.size(), cpu);
  if (ec != std::errc{} || end == comm.data() || end == comm.data() + comm.size() || *end != ':') {
    return std::nullopt;  // "u8:3" (unbound) or malformed
  }
  return cpu;
}

kworker_sample sample_kworkers() {
  kworker_sample s;
  DIR* proc = ::opendir("/proc");
  if (!proc) return s;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    std::string comm;
    {
      std::ifstream in(dir + "/comm");
      if (!std::getline(in, comm)) continue;  // gone meanwhile
    }
    const auto cpu = kworker_cpu(comm);
    if (!cpu) continue;
    std::ifstream in(dir + "/schedstat");
    std::uint64_t run_ns = 0;
    if (!(in >> run_ns)) continue;
    s.threads[static_cast<pid_t>(pid)] = {*cpu, run_ns};
  }
  ::closedir(proc);
  return s;
}

std::map<int, std::uint64_t> kworker_gain_per_cpu(const kworker_sample& before,
                                                  const kworker_sample& after) {
  std::map<int, std::uint64_t> gain;
  for (const auto& [pid, t] : after.threads) {
    const auto it = before.threads.find(pid);
    const std::uint64_t base =
        it != before.threads.end() && it->second.cpu == t.cpu ? it->second.run_ns : 0;
    gain[t.cpu] += t.run_ns > base ? t.run_ns - base : 0;
  }
  return gain;
}

}  // namespace quiesce::host
