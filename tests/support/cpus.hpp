// SPDX-License-Identifier: Apache-2.0
// Test helpers: the first and last CPU this process may run on (per-CPU queueing tests).
#pragma once

#include "quiesce/topology.hpp"

namespace quiesce::test {

inline int first_cpu() {
  return system_topology().cpus().first();
}
inline int last_cpu() {
  return system_topology().cpus().cpus().back();
}

}  // namespace quiesce::test
