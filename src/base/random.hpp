// SPDX-License-Identifier: Apache-2.0
// Marsaglia's xorshift64 (shifts 13, 7, 17): the workloads' deterministic pseudo-random
// numbers (key serials, bench data, random read offsets). Fast, reproducible from its
// seed, and not for anything an attacker must not predict. Internal; not installed.
#pragma once

#include <cstdint>

namespace quiesce {

// Advances `state` (which must not be 0, or it stays 0) and returns the new value.
constexpr std::uint64_t xorshift64(std::uint64_t& state) noexcept {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

}  // namespace quiesce
