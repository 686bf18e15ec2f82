// SPDX-License-Identifier: Apache-2.0
// cpu_relax(): the pause a spin-wait loop makes between two looks at shared memory (the
// kernel's cpu_relax(), liburcu's caa_cpu_relax()): it tells the core the loop spins, so a
// hyperthread sibling gets the pipeline and leaving the loop does not flush it. The one
// place to port when quiesce builds for a CPU other than x86-64.
#pragma once

namespace quiesce::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace quiesce::detail
