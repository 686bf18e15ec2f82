// SPDX-License-Identifier: Apache-2.0
// quiesce/detail/list_node.hpp - the link of quiesce's intrusive lists (the kernel's
// list_head). Internal: installed only because detail::work_state embeds one; the list
// that links it lives in src/base/list.hpp.
#pragma once

namespace quiesce::detail {

struct list_node {
  list_node* prev = nullptr;
  list_node* next = nullptr;
  void* owner = nullptr;  // the object this node is embedded in, set when linked
  bool linked() const noexcept { return next != nullptr; }
};

}  // namespace quiesce::detail
