// SPDX-License-Identifier: Apache-2.0
#include "completion.hpp"

namespace quiesce::detail {

completion_channel completion_channels[completion_channel_count];

completion_channel& completion_channel_for(const void* key) noexcept {
  return channel_of(key);
}

}  // namespace quiesce::detail
