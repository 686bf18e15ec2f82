// SPDX-License-Identifier: Apache-2.0
// An intrusive doubly-linked list, the kernel's list_head in C++ (internal).
//
// A node is embedded in the object it links; linking and unlinking are O(1) and never
// allocate, so a work item can be queued and cancelled under a lock without touching the
// heap. The list does not own its elements. Not thread-safe: the lock that protects a list
// protects the nodes linked into it.
#pragma once

#include <cstddef>
#include <functional>

#include "quiesce/detail/list_node.hpp"

namespace quiesce::detail {

// A circular list of T, linked through the list_node that `Node` names in a T: a pointer
// to a member of T, or a function taking T& and returning the node's reference.
template <typename T, auto Node>
class intrusive_list {
 public:
  intrusive_list() noexcept { head_.prev = head_.next = &head_; }
  intrusive_list(const intrusive_list&) = delete;
  intrusive_list& operator=(const intrusive_list&) = delete;

  bool empty() const noexcept { return head_.next == &head_; }
  std::size_t size() const noexcept { return size_; }

  T* front() const noexcept { return empty() ? nullptr : owner(head_.next); }
  T* back() const noexcept { return empty() ? nullptr : owner(head_.prev); }
  // The element after `item`, or nullptr at the end.
  T* next(T* item) const noexcept {
    list_node* n = node(item).next;
    return n == &head_ ? nullptr : owner(n);
  }

  void push_back(T* item) noexcept { insert_before(&head_, item); }
  void push_front(T* item) noexcept { insert_before(head_.next, item); }
  // Links `item` just before `pos`, which must be linked into this list.
  void insert_before(T* pos, T* item) noexcept { insert_before(&node(pos), item); }

  // Unlinks `item`, which must be linked into this list.
  void erase(T* item) noexcept {
    list_node& n = node(item);
    n.prev->next = n.next;
    n.next->prev = n.prev;
    n.prev = n.next = nullptr;
    --size_;
  }

  T* pop_front() noexcept {
    T* item = front();
    if (item) erase(item);
    return item;
  }

 private:
  void insert_before(list_node* pos, T* item) noexcept {
    list_node& n = node(item);
    n.owner = item;
    n.prev = pos->prev;
    n.next = pos;
    pos->prev->next = &n;
    pos->prev = &n;
    ++size_;
  }

  static list_node& node(T* item) noexcept { return std::invoke(Node, *item); }
  static T* owner(list_node* n) noexcept { return static_cast<T*>(n->owner); }

  list_node head_;
  std::size_t size_ = 0;
};

}  // namespace quiesce::detail
