// SPDX-License-Identifier: Apache-2.0
// workqueue::post's items: their memory (free lists per CPU, each thread caching a few
// batches of nodes), queueing them, and destroying them after their function ran.
//
// A posted item is allocated on the poster's thread and freed on the worker that ran it,
// so nodes flow from workers to posters. Each thread keeps a cache of free nodes (no lock);
// past two batches it gives one batch to the free list of the CPU it runs on, and when
// empty it takes a batch from its CPU's list, then from any other CPU's, and only then
// allocates a new slab of one batch. So a lock is taken once per batch of nodes, not per
// post, and memory grows only to the most nodes ever in flight (plus the caches).
//
// Protection legend: T = the owning thread only (thread_local); L(depot) = under that
// depot's lock; L(slabs) = under slab_lock; I = set before any other thread can see it.
// No lock is held while calling out (a depot's lock covers a few pointer writes).
#include <unistd.h>

#include <sched.h>
#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "../base/cache_line.hpp"
#include "../base/mutex.hpp"
#include "internal.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::detail {

namespace {

// Nodes are whole cache lines, so that two in flight on two CPUs never share one.
constexpr std::size_t node_size = (sizeof(delayed_work) + cache_line - 1) / cache_line * cache_line;
constexpr std::size_t node_align = std::max(alignof(delayed_work), cache_line);
// Four lines on LP64 (work_state's layout): a fifth, one more line written by the poster
// and missed by the worker for every post, cost bound posted lambdas 5-23% (issue 29: seven
// alternations of bench_wq's throughput_post rows, 2026-12-06, docs/workqueue.md).
static_assert(sizeof(void*) != 8 || node_size <= 4 * cache_line,
              "a posted node grew past four cache lines: see work_state's layout");
constexpr unsigned batch_nodes = 32;

// A free node's first bytes. The head of a chain kept in a depot also links the depot's
// next chain and says how long its own is, so that a depot never allocates.
struct free_node {
  free_node* next;
  free_node* next_chain;
  unsigned chain_count;
};

// A chain of free nodes.
struct chain {
  free_node* head = nullptr;
  unsigned count = 0;

  void push(free_node* n) noexcept {
    n->next = head;
    head = n;
    ++count;
  }
  free_node* pop() noexcept {
    free_node* n = head;
    head = n->next;
    --count;
    return n;
  }
  // The first `n` nodes, taken off this chain.
  chain take(unsigned n) noexcept {
    chain out;
    while (out.count < n && head != nullptr)
      out.push(pop());
    return out;
  }
};

struct alignas(cache_line) depot {
  mutex lock;
  free_node* chains QUIESCE_GUARDED_BY(lock) = nullptr;  // linked by next_chain
};

struct free_lists {
  free_lists()
      : n(static_cast<std::size_t>(std::max(1L, ::sysconf(_SC_NPROCESSORS_CONF)))),
        depots(new depot[n]) {}

  const std::size_t n;                    // I
  const std::unique_ptr<depot[]> depots;  // I
  mutex slab_lock;
  // Every slab ever allocated (never freed): nodes dropped at exit stay reachable.
  std::vector<void*> slabs QUIESCE_GUARDED_BY(slab_lock);
};

// Never destroyed: workers free nodes until the process ends.
free_lists& lists() {
  static free_lists* const l = new free_lists;
  return *l;
}

depot& depot_of_this_cpu(free_lists& l) {
  const int cpu = ::sched_getcpu();
  return l
      .depots[cpu >= 0 && static_cast<std::size_t>(cpu) < l.n ? static_cast<std::size_t>(cpu) : 0];
}

void give(chain c) noexcept {
  if (c.count == 0) return;
  depot& d = depot_of_this_cpu(lists());
  c.head->chain_count = c.count;
  lock_guard guard(d.lock);
  c.head->next_chain = d.chains;
  d.chains = c.head;
}

// A batch of free nodes: this CPU's list first, then any other's, else a new slab.
chain take_batch() {
  free_lists& l = lists();
  depot& mine = depot_of_this_cpu(l);
  const std::size_t first = static_cast<std::size_t>(&mine - l.depots.get());
  for (std::size_t i = 0; i < l.n; ++i) {
    depot& d = l.depots[(first + i) % l.n];
    lock_guard guard(d.lock);
    if (free_node* head = d.chains) {
      d.chains = head->next_chain;
      return chain{head, head->chain_count};
    }
  }
  auto* slab = static_cast<unsigned char*>(
      ::operator new (node_size* batch_nodes, std::align_val_t{node_align}));
  {
    lock_guard guard(l.slab_lock);
    try {
      l.slabs.push_back(slab);
    } catch (...) {
      ::operator delete (slab, std::align_val_t{node_align});
      throw;
    }
  }
  chain c;
  for (unsigned i = batch_nodes; i-- > 0;)
    c.push(reinterpret_cast<free_node*>(slab + i * node_size));
  return c;
}

// This thread's cache. Trivially destructible, so that it is usable until the thread's
// last moment; its nodes go back to a depot when the thread exits (cache_return).
struct thread_cache {
  chain nodes;          // T
  bool reaper = false;  // T: cache_return is registered
  bool dead = false;    // T: the thread is exiting; nodes go straight to the depots
};
thread_local thread_cache tl_cache;

struct cache_return {
  ~cache_return() {
    // In a forked child the depots' locks may be held by parent threads that are not here
    // (the child exits; its nodes go with it).
    if (!in_forked_child()) give(tl_cache.nodes);
    tl_cache.nodes = {};
    tl_cache.dead = true;
  }
};

void register_cache_return() noexcept {
  thread_local cache_return reaper;
  (void)reaper;
  tl_cache.reaper = true;
}

}  // namespace

void* posted_alloc(const char* what) {
  refuse_in_forked_child(what);  // the depots' locks may be held by threads not in a child
  thread_cache& c = tl_cache;
  if (c.dead) {
    chain batch = take_batch();
    free_node* n = batch.pop();
    give(batch);
    return n;
  }
  if (!c.reaper) register_cache_return();
  if (c.nodes.head == nullptr) c.nodes = take_batch();
  if constexpr (mutant::post_node_handed_out_twice) return c.nodes.head;  // left in the cache
  free_node* const n = c.nodes.pop();
  // The node the next post takes: freed by the worker that ran it, often on another CPU, it
  // costs a miss to pop (its `next`) and one per line to construct (issue 29: 98% of this
  // function's samples were the load of `next`) - fetched while this post goes on.
  prefetch_for_write(c.nodes.head, node_size);
  return n;
}

void posted_free(void* memory) noexcept {
  auto* n = static_cast<free_node*>(memory);
  thread_cache& c = tl_cache;
  if (c.dead) {
    chain one;
    one.push(n);
    give(one);
    return;
  }
  if (!c.reaper) register_cache_return();
  c.nodes.push(n);
  if (c.nodes.count >= 2 * batch_nodes) give(c.nodes.take(batch_nodes));
}

void posted_destroy(work& node) noexcept {
  node.~work();  // virtual: the delayed_work it is
  posted_free(&node);
}

bool posted_queue(workqueue& wq, int cpu, delayed_work& node, std::chrono::nanoseconds delay) {
  bool queued = false;
  try {
    if (delay == std::chrono::nanoseconds::zero()) {
      queued = cpu < 0 ? wq.queue(node) : wq.queue_on(cpu, node);
    } else {
      queued = cpu < 0 ? wq.queue_delayed(node, delay) : wq.queue_delayed_on(cpu, node, delay);
    }
  } catch (...) {
    posted_destroy(node);
    throw;
  }
  // A new item is never pending: false is a refusal, and nothing else holds the item.
  if (!queued && !mutant::post_refused_kept) posted_destroy(node);
  return queued;
}

}  // namespace quiesce::detail
