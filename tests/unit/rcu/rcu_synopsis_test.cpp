// SPDX-License-Identifier: Apache-2.0
// The public surface against the C++26 draft's <rcu> synopsis ([rcu.syn],
// [saferecl.rcu.base], [saferecl.rcu.domain.general], [saferecl.rcu.domain.func]):
// code written against a standard <rcu> must compile, and behave, the same
// against quiesce. Most checks are compile-time: this file not compiling is the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>

#include "quiesce/rcu.hpp"

namespace quiesce {
namespace {

// [saferecl.rcu.domain.general]: no public constructor, not copyable or movable;
// Cpp17Lockable (lock, try_lock, unlock), all noexcept.
static_assert(!std::is_default_constructible_v<rcu_domain>);
static_assert(!std::is_copy_constructible_v<rcu_domain>);
static_assert(!std::is_move_constructible_v<rcu_domain>);
static_assert(!std::is_copy_assignable_v<rcu_domain>);
static_assert(!std::is_move_assignable_v<rcu_domain>);
static_assert(noexcept(std::declval<rcu_domain&>().lock()));
static_assert(noexcept(std::declval<rcu_domain&>().unlock()));
static_assert(noexcept(std::declval<rcu_domain&>().try_lock()));
static_assert(std::is_same_v<decltype(std::declval<rcu_domain&>().try_lock()), bool>);
static_assert(std::is_same_v<decltype(std::declval<rcu_domain&>().lock()), void>);

// [saferecl.rcu.domain.func]: the free functions, their defaults and noexcept.
static_assert(std::is_same_v<decltype(&rcu_default_domain), rcu_domain& (*)() noexcept>);
static_assert(noexcept(rcu_synchronize()));
static_assert(noexcept(rcu_barrier()));
static_assert(std::is_same_v<decltype(rcu_synchronize()), void>);
static_assert(std::is_same_v<decltype(rcu_barrier(rcu_default_domain())), void>);
static_assert(std::is_same_v<decltype(rcu_retire(static_cast<int*>(nullptr))), void>);
// rcu_retire may throw (bad_alloc): not noexcept.
static_assert(!noexcept(rcu_retire(static_cast<int*>(nullptr))));

// [saferecl.rcu.base]: rcu_obj_base<T, D> with D = default_delete<T>; retire(D = D(),
// rcu_domain& = rcu_default_domain()) noexcept; protected special members; trivially
// copyable when D is.
struct plain : rcu_obj_base<plain> {
  int v = 0;
};
static_assert(std::is_same_v<rcu_obj_base<plain>, rcu_obj_base<plain, std::default_delete<plain>>>);
static_assert(noexcept(std::declval<plain&>().retire()));
static_assert(std::is_trivially_copyable_v<rcu_obj_base<plain>>);
static_assert(std::is_trivially_copyable_v<plain>);
static_assert(!std::is_constructible_v<rcu_obj_base<plain>>);  // protected constructor
static_assert(!std::is_destructible_v<rcu_obj_base<plain>>);   // protected destructor
struct custom_deleter {
  void operator()(struct with_custom*) const;
};
struct with_custom : rcu_obj_base<with_custom, custom_deleter> {};
static_assert(std::is_trivially_copyable_v<rcu_obj_base<with_custom, custom_deleter>>);

// No internal name leaks into user classes: a class deriving from rcu_obj_base and from a
// base with members of common names can use them unqualified.
struct common_names {
  int next = 1, func = 2, reclaim = 3, deleter_ = 4, deleter = 5, ptr = 6, head = 7;
};
struct both : rcu_obj_base<both>, common_names {
  int sum() const { return next + func + reclaim + deleter_ + deleter + ptr + head; }
};

// std::scoped_lock works on a domain (Cpp17Lockable).
TEST(RcuSynopsis, ScopedLockAndUniqueLockWorkOnTheDefaultDomain) {
  {
    std::scoped_lock guard(rcu_default_domain());
    std::unique_lock inner(rcu_default_domain());
    EXPECT_TRUE(inner.owns_lock());
  }
  rcu_synchronize();  // outside any section: returns
}

TEST(RcuSynopsis, AClassWithCommonMemberNamesRetiresItself) {
  auto* b = new both;
  EXPECT_EQ(b->sum(), 28);
  b->retire();
  rcu_barrier();
}

TEST(RcuSynopsis, ACopyOfAnObjectRetiresOnItsOwn) {
  struct counted : rcu_obj_base<counted, void (*)(counted*)> {
    int v = 0;
  };
  static std::atomic<int> freed{0};
  freed = 0;
  auto* a = new counted;
  a->v = 7;
  auto* b = new counted(*a);  // trivially copyable: a plain copy
  EXPECT_EQ(b->v, 7);
  a->retire([](counted* p) {
    ++freed;
    delete p;
  });
  b->retire([](counted* p) {
    ++freed;
    delete p;
  });
  rcu_barrier();
  EXPECT_EQ(freed.load(), 2);
}

}  // namespace
}  // namespace quiesce
