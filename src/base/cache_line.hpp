// SPDX-License-Identifier: Apache-2.0
// The cache line size quiesce lays shared data out by: fields written by different threads
// sit on different lines (alignas(cache_line)), so that one thread's stores do not take the
// line from under another's; and the prefetch of an object another CPU wrote last. 64 bytes
// on x86-64 and most arm64 cores (std::hardware_destructive_interference_size is the same
// number, but GCC warns that it may change between compiler versions, which would change
// our ABI).
#pragma once

#include <cstddef>

namespace quiesce::detail {

inline constexpr std::size_t cache_line = 64;

// Starts bringing the `bytes` at `p` into this CPU's cache for writing, without waiting for
// them: for an object that another CPU wrote last and this one is about to write (a posted
// node freed on a worker), so that the misses overlap the work before it instead of
// stalling it (as SLUB's prefetch_freepointer). A prefetch never faults: `p` may be null
// or already freed.
inline void prefetch_for_write(const void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  const char* const at = static_cast<const char*>(p);
  for (std::size_t off = 0; off < bytes; off += cache_line)
    __builtin_prefetch(at + off, 1);
}

}  // namespace quiesce::detail
