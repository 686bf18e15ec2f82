// SPDX-License-Identifier: Apache-2.0
#include "completion.hpp"

namespace quiesce::detail {

std::atomic<std::uint32_t> completion_seq{0};
std::atomic<int> completion_waiters{0};

}  // namespace quiesce::detail
