// SPDX-License-Identifier: Apache-2.0
// No heap allocation on RCU's noexcept paths: lock()/unlock() (including
// the first on a thread, which registers it), rcu_obj_base::retire, rcu_synchronize and
// rcu_barrier, for every domain. This binary replaces malloc and friends (forwarding to
// glibc's) and counts the calls the measuring thread makes while armed; armed with
// `fail`, every such allocation also fails, as under memory exhaustion. Before the fix the
// first lock(), retire() and rcu_synchronize() each allocated (thread names, the callback
// thread, the stall detector) and died when that failed. Not built with sanitizers (they
// own malloc).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <thread>

#include "quiesce/rcu.hpp"

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {
thread_local bool tls_armed = false;  // count (and maybe fail) this thread's allocations
thread_local bool tls_fail = false;
std::atomic<int> g_allocations{0};

bool intercept() {
  if (!tls_armed) return false;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return tls_fail;
}
}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  if (intercept()) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  if (intercept()) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  if (intercept()) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(p, n);
}
void* memalign(std::size_t align, std::size_t n) {
  if (intercept()) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  if (intercept()) return ENOMEM;
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  return memalign(align, n);
}
void free(void* p) {
  __libc_free(p);
}
}

namespace quiesce {
namespace {

struct node final : rcu_obj_base<node> {
  int value = 0;
};

// Every noexcept RCU primitive on a fresh thread, armed. Returns the allocations counted.
int allocations_of_the_primitives(bool fail) {
  // Made before arming: the test's own objects.
  node* nodes[3] = {new node, new node, new node};
  int counted = -1;
  std::thread([&] {
    g_allocations = 0;
    tls_fail = fail;
    tls_armed = true;
    rcu_domain* domains[3] = {&rcu_default_domain(), &rcu_qsbr_domain(), &rcu_tasks_domain()};
    rcu_default_domain().lock();  // the first on this thread: registers it
    rcu_default_domain().lock();
    rcu_default_domain().unlock();
    rcu_default_domain().unlock();
    for (int i = 0; i < 3; ++i) {
      rcu_domain& d = *domains[i];
      nodes[i]->retire(std::default_delete<node>(), d);
      rcu_synchronize(d);
      rcu_barrier(d);
    }
    tls_armed = false;
    counted = g_allocations.load();
  }).join();
  return counted;
}

// The counter itself works: an allocation while armed is seen (and failed when asked).
TEST(RcuNoAlloc, TheInterposerSeesAndFailsAllocations) {
  std::thread([] {
    g_allocations = 0;
    tls_armed = true;
    void* p = std::malloc(64);
    auto* q = new int(3);
    tls_fail = true;
    void* r = std::malloc(64);
    tls_armed = false;
    tls_fail = false;
    EXPECT_EQ(g_allocations.load(), 3);
    EXPECT_NE(p, nullptr);
    EXPECT_EQ(r, nullptr);
    std::free(p);
    delete q;
  }).join();
}

TEST(RcuNoAlloc, LockUnlockRetireSynchronizeAndBarrierNeverAllocate) {
  EXPECT_EQ(allocations_of_the_primitives(/*fail=*/false), 0)
      << "an RCU primitive allocated from the heap";
}

TEST(RcuNoAlloc, TheyCompleteWhenEveryAllocationFails) {
  // Reaching the end (and the count) is the test: before, this process terminated.
  EXPECT_EQ(allocations_of_the_primitives(/*fail=*/true), 0);
}

}  // namespace
}  // namespace quiesce
