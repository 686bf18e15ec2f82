// SPDX-License-Identifier: Apache-2.0
// wq_alloc_child: a worker creation that runs out of memory. This program replaces the
// global operator new with one that throws std::bad_alloc on demand, so it is a program of
// its own: wq_exit_child runs under valgrind, whose operator new would not pair with these
// deletes.
//
// The scenario: a worker creation that runs out of memory (the worker object or its
// std::thread throwing std::bad_alloc) fails as one past a thread limit does - the queue()
// that tried it returns normally, its item waits in a pool without workers, and the
// watchdog's retry creates the worker once memory is back. Status 0: so; 2: the scenario
// could not be set up (the creation did not fail, or queueing was refused); 5: the
// bad_alloc left queue(), or the item never ran. An abort: the bad_alloc went on out of the
// runtime (std::terminate).
#include <sys/prctl.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "quiesce/workqueue.hpp"
#include "worker_creation_scenario.hpp"

namespace {

// While set on a thread, every operator new there throws std::bad_alloc. Otherwise these
// do what libstdc++'s own operators do (malloc, aligned_alloc, free).
thread_local bool t_fail_allocations = false;

void* allocate(std::size_t n, std::size_t align) {
  if (t_fail_allocations) throw std::bad_alloc();
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) {
  return allocate(n, 0);
}
void* operator new[](std::size_t n) {
  return allocate(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

int main() {
  // Dies with the test that started it (a mutant's child may hang).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  using quiesce::work;
  using quiesce::workqueue;
  if (!quiesce::test::start_runtime_threads()) return 2;
  workqueue limited("limited",
                    quiesce::wq_options{.unbound = true, .scope = quiesce::affinity_scope::system});
  std::atomic<bool> ran{false};
  work item("limited", [&ran](work&) { ran = true; });
  bool queued = false;
  t_fail_allocations = true;
  try {
    queued = limited.queue(item);
  } catch (const std::bad_alloc&) {
    t_fail_allocations = false;
    std::fprintf(stderr, "wq_alloc_child: queue() threw std::bad_alloc\n");
    return 5;
  }
  t_fail_allocations = false;
  if (!queued) return 2;
  // The creation failed: else the scenario tests nothing.
  if (!quiesce::test::item_waits_in_a_pool_without_workers() || ran) {
    std::fprintf(stderr, "wq_alloc_child: the worker's creation did not fail\n");
    return 2;
  }
  item.flush();  // the retry's worker runs it
  return ran ? 0 : 5;
}
