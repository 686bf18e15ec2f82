// SPDX-License-Identifier: Apache-2.0
// instance_count::zero(): the two-pass read (instance_count.hpp).
#include "instance_count.hpp"

#include "internal.hpp"

namespace quiesce::detail {

bool instance_count::zero(void (*after_slot)(void*, std::size_t), void* ctx) const noexcept {
  std::uint64_t ended_sum = 0;
  std::uint64_t created_sum = 0;
  if (mutant::instance_count_one_pass) {
    for (std::size_t i = 0; i < n_; ++i) {
      created_sum += slots_[i].created.load(std::memory_order_seq_cst);
      ended_sum += slots_[i].ended.load(std::memory_order_seq_cst);
      if (after_slot) after_slot(ctx, i);
    }
    return created_sum == ended_sum;
  }
  for (std::size_t i = 0; i < n_; ++i) {
    ended_sum += slots_[i].ended.load(std::memory_order_seq_cst);
    if (after_slot) after_slot(ctx, i);
  }
  for (std::size_t i = 0; i < n_; ++i)
    created_sum += slots_[i].created.load(std::memory_order_seq_cst);
  return created_sum == ended_sum;
}

}  // namespace quiesce::detail
