// SPDX-License-Identifier: Apache-2.0
// An adaptive budget: how long (or how many times) to spin before sleeping, doubled each
// time spinning paid off and halved each time it did not, within [Min, Max]. Used by the
// grace period's spin (rcu/internal.hpp) and an unbound worker's look for work
// (wq/internal.hpp). Not thread-safe: each user says what protects it.
#pragma once

namespace quiesce::detail {

template <typename T, T Min, T Max>
struct adaptive_budget {
  static constexpr T min = Min;
  static constexpr T max = Max;
  T value = Max;
  void paid_off() noexcept { value = value * 2 < Max ? value * 2 : Max; }
  void wasted() noexcept { value = value / 2 > Min ? value / 2 : Min; }
  // At least `v` from now on (at most Max).
  void at_least(T v) noexcept {
    if (value < v) value = v < Max ? v : Max;
  }
};

}  // namespace quiesce::detail
