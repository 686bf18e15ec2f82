// SPDX-License-Identifier: Apache-2.0
// CPU time of the kernel's per-CPU workqueue workers (threads named "kworker/<cpu>:<id>"),
// per CPU, from /proc/<pid>/schedstat (nanoseconds). Sampled before and after a phase, the
// CPU whose kworkers gained the most ran the work: how `quiesce keygc --kernel` finds the
// CPU that ran key_garbage_collector and how long it ran, without tracefs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

namespace quiesce::host {

// The CPU of a bound kworker's name ("kworker/1:2", "kworker/0:1H" -> 1, 0), nullopt for
// anything else (unbound "kworker/u8:3", other threads).
std::optional<int> kworker_cpu(std::string_view comm);

// Run time so far of every bound kworker, keyed by pid, with its CPU.
struct kworker_sample {
  struct thread {
    int cpu = -1;
    std::uint64_t run_ns = 0;
  };
  std::map<pid_t, thread> threads;
};
kworker_sample sample_kworkers();

// Per CPU, the run time the bound kworkers gained between two samples (a kworker born in
// between counts from zero).
std::map<int, std::uint64_t> kworker_gain_per_cpu(const kworker_sample& before,
                                                  const kworker_sample& after);

}  // namespace quiesce::host
