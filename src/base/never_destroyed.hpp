// SPDX-License-Identifier: Apache-2.0
// never_destroyed<T>: a T constructed in place and never destroyed, for process-lifetime
// runtime objects that threads may still use while static destructors run at exit (the
// system workqueues, the RCU domains' state). Not installed.
#pragma once

#include <new>
#include <utility>

namespace quiesce::detail {

template <typename T>
class never_destroyed {
 public:
  template <typename... Args>
  explicit never_destroyed(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  never_destroyed(const never_destroyed&) = delete;
  never_destroyed& operator=(const never_destroyed&) = delete;
  T& get() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace quiesce::detail
