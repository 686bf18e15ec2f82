// SPDX-License-Identifier: Apache-2.0
// The number of instances of a workqueue that exist (armed, queued, in transit or
// running), counted without a cache line that every CPU writes.
//
// Each CPU has a slot of two monotonic counters: instances created and instances ended
// on that CPU (an instance may end on another CPU than the one that created it). Every
// queueing and every completion writes only its own CPU's slot, so a bound queue's
// poster and worker never share a written cache line with another CPU's.
//
// zero() is exact in the only sense drain() needs - "at some moment during this call, no
// instance existed" - with the two-pass read SRCU uses for its per-CPU lock and unlock
// counts: it reads every slot's `ended` first, then every slot's `created`. The counters
// only grow, and an instance's end comes after its creation, so at the moment between the
// two passes ended(t) >= E and created(t) <= C; equal sums mean created(t) - ended(t) <= 0,
// i.e. nothing existed at t. (A single pass that read created and ended slot by slot could
// miss an instance created on a slot already read while the one that created it ended on
// a slot not read yet.)
//
// Protection legend: A (seq_cst atomics, written by whichever thread runs on the CPU).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../base/cache_line.hpp"

namespace quiesce::detail {

class instance_count {
 public:
  // `slots`: the number of CPU numbers sched_getcpu() may return (more is harmless; a CPU
  // beyond them counts in slot 0).
  explicit instance_count(std::size_t slots) : n_(slots == 0 ? 1 : slots), slots_(new slot[n_]) {}

  void created() noexcept { mine().created.fetch_add(1, std::memory_order_seq_cst); }
  void ended() noexcept { mine().ended.fetch_add(1, std::memory_order_seq_cst); }

  // True if, at some moment during the call, no instance existed (see above).
  // `after_slot`, if given, is called with `ctx` and the slot's index after each slot of
  // the first pass has been read (tests interleave creations and ends there).
  bool zero(void (*after_slot)(void* ctx, std::size_t slot) = nullptr,
            void* ctx = nullptr) const noexcept;

 private:
  struct alignas(cache_line) slot {
    std::atomic<std::uint64_t> created{0};  // A
    std::atomic<std::uint64_t> ended{0};    // A
  };
  slot& mine() noexcept {
    const int cpu = ::sched_getcpu();
    return slots_[cpu >= 0 && static_cast<std::size_t>(cpu) < n_ ? static_cast<std::size_t>(cpu)
                                                                 : 0];
  }

  const std::size_t n_;
  const std::unique_ptr<slot[]> slots_;
};

}  // namespace quiesce::detail
