// SPDX-License-Identifier: Apache-2.0
// The cache line size quiesce lays shared data out by: fields written by different threads
// sit on different lines (alignas(cache_line)), so that one thread's stores do not take the
// line from under another's. 64 bytes on x86-64 and most arm64 cores (std::
// hardware_destructive_interference_size is the same number, but GCC warns that it may
// change between compiler versions, which would change our ABI).
#pragma once

#include <cstddef>

namespace quiesce::detail {

inline constexpr std::size_t cache_line = 64;

}  // namespace quiesce::detail
