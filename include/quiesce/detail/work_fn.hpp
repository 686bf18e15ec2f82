// SPDX-License-Identifier: Apache-2.0
// quiesce/detail/work_fn.hpp - the function a work item holds: any callable invocable with
// the item, move-only ones included (a lambda capturing a unique_ptr, a packaged_task),
// held inside the item when it fits and on the heap otherwise. Internal: class work embeds
// one; users pass their callable to work's constructor.
//
// A work_fn is built in place and never moves (an item is neither copyable nor movable),
// so it needs only two operations per stored type - invoke and destroy - and one pointer
// to a static table of them: no std::function, no copy, no virtual call beyond that one
// indirect call per execution.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace quiesce {
class work;
}  // namespace quiesce

namespace quiesce::detail {

// What names an item's function when no name is given (the kernel prints it with %ps):
// its type, and its address when it is a plain function.
struct callable_identity {
  const std::type_info* type = nullptr;
  void (*plain)() = nullptr;
};

// The identity of a stored callable. Adapters that wrap a user's callable (delayed_work's,
// post's) name the callable they wrap by declaring `callable_identity identity() const`.
template <class D>
callable_identity identity_of(const D& d) noexcept {
  if constexpr (requires {
                  { d.identity() } -> std::same_as<callable_identity>;
                }) {
    return d.identity();
  } else if constexpr (std::is_pointer_v<D> && std::is_function_v<std::remove_pointer_t<D>>) {
    return {&typeid(D), reinterpret_cast<void (*)()>(d)};
  } else if constexpr (std::is_same_v<D, std::function<void(work&)>>) {
    using fn_ptr = void (*)(work&);
    const fn_ptr* fp = d.template target<fn_ptr>();
    return {&d.target_type(), fp ? reinterpret_cast<void (*)()>(*fp) : nullptr};
  } else {
    return {&typeid(D), nullptr};
  }
}

// True for what may not be called: a null function pointer, an empty std::function or
// move_only_function (anything with an operator bool that says false).
template <class D>
bool is_empty_callable(const D& d) noexcept {
  if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D>) {
    return d == nullptr;
  } else if constexpr (requires { d.operator bool(); }) {
    return !d.operator bool();
  } else {
    return false;
  }
}

template <class Item>
class work_fn {
 public:
  // Bytes a callable may take to be held in place: a lambda capturing up to six pointers,
  // a std::function, a std::packaged_task. Pointer-aligned (a callable that needs more, as one
  // capturing a long double, goes on the heap): 16-byte storage would pad the item by 8
  // bytes and push its queuer's fields across a cache line (work_state.hpp).
  static constexpr std::size_t inline_size = 48;

  template <class F>
  requires std::is_invocable_v < std::decay_t<F>
  &, Item& > explicit work_fn(F&& f) {
    using D = std::decay_t<F>;
    if constexpr (fits_inline<D>()) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      ops_ = &inline_ops<D>;
    } else {
      ::new (static_cast<void*>(storage_)) D*(new D(std::forward<F>(f)));
      ops_ = &heap_ops<D>;
    }
  }
  work_fn(const work_fn&) = delete;
  work_fn& operator=(const work_fn&) = delete;
  ~work_fn() { ops_->destroy(storage_); }

  void operator()(Item& item) { ops_->invoke(storage_, item); }
  callable_identity identity() const noexcept { return ops_->identity(storage_); }
  bool empty() const noexcept { return ops_->empty(storage_); }

 private:
  struct ops {
    void (*invoke)(void*, Item&);
    void (*destroy)(void*) noexcept;
    callable_identity (*identity)(const void*) noexcept;
    bool (*empty)(const void*) noexcept;
  };

  template <class D>
  static constexpr bool fits_inline() {
    return sizeof(D) <= inline_size && alignof(D) <= alignof(void*);
  }

  template <class D>
  static constexpr ops inline_ops{
      [](void* s, Item& item) { std::invoke(*static_cast<D*>(s), item); },
      [](void* s) noexcept { static_cast<D*>(s)->~D(); },
      [](const void* s) noexcept { return identity_of(*static_cast<const D*>(s)); },
      [](const void* s) noexcept { return is_empty_callable(*static_cast<const D*>(s)); }};
  template <class D>
  static constexpr ops heap_ops{
      [](void* s, Item& item) { std::invoke(**static_cast<D**>(s), item); },
      [](void* s) noexcept { delete *static_cast<D**>(s); },
      [](const void* s) noexcept { return identity_of(**static_cast<D* const*>(s)); },
      [](const void* s) noexcept { return is_empty_callable(**static_cast<D* const*>(s)); }};

  alignas(void*) unsigned char storage_[inline_size];
  const ops* ops_;
};

}  // namespace quiesce::detail
