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
// Memory goes back too (kernel: SLUB discarding empty slabs, kmem_cache_shrink): a trim
// takes every node off the depots, frees each slab whose nodes were all there, and gives
// the rest back. trim_posted_memory() trims on demand; by itself, once a batch given back
// (posted_free) leaves the depots holding more than trim_arm_nodes, a delayed item on a
// queue of its own looks every trim_interval and frees the whole slabs among the nodes that
// stayed on the depots for that whole interval (their low-water mark) beyond
// trim_keep_nodes. A node in use or in a thread's cache is never on a depot, so its slab is
// never freed. One trim at a time (trim_lock): a trim's snapshot of the slabs must not be
// freed under it.
//
// Protection legend: T = the owning thread only (thread_local); L(depot) = under that
// depot's lock; L(slabs) = under slab_lock; I = set before any other thread can see it;
// A = atomic, relaxed (counts that decide only how much to trim, never what is safe to);
// S = atomic, seq_cst. Lock order: trim_lock, then a depot's lock or slab_lock.
// No lock is held while calling out (a depot's lock covers a few pointer writes).
#include <unistd.h>

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <utility>
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
constexpr std::size_t slab_bytes = node_size * batch_nodes;

// The automatic trim (see the opening comment): armed past 8,192 nodes on the depots (2 MiB
// of 256-byte nodes), it keeps 2,048 of those that went unused (512 KiB), so that a steady
// load never pays for fresh memory and a burst's memory goes back a second after it ends.
constexpr std::size_t trim_arm_nodes = 8192;
constexpr std::size_t trim_keep_nodes = 2048;
constexpr std::chrono::seconds trim_interval{1};

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

// Counts of the depots as a whole, on a line of their own (written once per batch).
struct alignas(cache_line) depot_counts {
  std::atomic<std::size_t> nodes{0};  // A: nodes on all the depots
  std::atomic<std::size_t> low{0};    // A: the fewest since the trimmer last looked
  std::atomic<std::size_t> slabs{0};  // A: slabs allocated and not yet freed
};

struct free_lists {
  free_lists()
      : n(static_cast<std::size_t>(std::max(1L, ::sysconf(_SC_NPROCESSORS_CONF)))),
        depots(new depot[n]) {}

  const std::size_t n;                    // I
  const std::unique_ptr<depot[]> depots;  // I
  depot_counts counts;
  mutex trim_lock;  // held by the one trim running
  mutex slab_lock;
  // Every slab allocated and not freed by a trim (which frees only slabs whose every node is
  // free): nodes dropped at exit stay reachable.
  std::vector<void*> slabs QUIESCE_GUARDED_BY(slab_lock);
  std::atomic<bool> trim_armed{false};  // S: the trimmer is queued or running
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

void lower_to(std::atomic<std::size_t>& low, std::size_t value) noexcept {
  std::size_t seen = low.load(std::memory_order_relaxed);
  while (value < seen && !low.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void give(chain c) noexcept {
  if (c.count == 0) return;
  free_lists& l = lists();
  depot& d = depot_of_this_cpu(l);
  c.head->chain_count = c.count;
  lock_guard guard(d.lock);
  c.head->next_chain = d.chains;
  d.chains = c.head;
  // Under the lock, as the take's subtraction: the count never runs below zero.
  l.counts.nodes.fetch_add(c.count, std::memory_order_relaxed);
}

// A batch of free nodes: this CPU's list first, then any other's, else a new slab.
chain take_batch() {
  free_lists& l = lists();
  depot& mine = depot_of_this_cpu(l);
  const std::size_t first = static_cast<std::size_t>(&mine - l.depots.get());
  for (std::size_t i = 0; i < l.n; ++i) {
    depot& d = l.depots[(first + i) % l.n];
    chain c;
    std::size_t left = 0;
    {
      lock_guard guard(d.lock);
      if (free_node* head = d.chains) {
        d.chains = head->next_chain;
        c = chain{head, head->chain_count};
        left = l.counts.nodes.fetch_sub(c.count, std::memory_order_relaxed) - c.count;
      }
    }
    if (c.head != nullptr) {
      lower_to(l.counts.low, left);
      return c;
    }
  }
  auto* slab =
      static_cast<unsigned char*>(::operator new (slab_bytes, std::align_val_t{node_align}));
  {
    lock_guard guard(l.slab_lock);
    try {
      l.slabs.push_back(slab);
      l.counts.slabs.fetch_add(1, std::memory_order_relaxed);
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

// Frees the slabs whose every node is on the depots, at most `limit` nodes' worth; returns
// the bytes freed. Every depot's chains are taken off it meanwhile (a post that finds them
// empty allocates a slab: the trim runs seldom). Throws std::bad_alloc before it takes any.
std::size_t trim(free_lists& l, std::size_t limit) QUIESCE_REQUIRES(l.trim_lock) {
  // The slabs, sorted (a node's slab is the last one at or below it); allocated first, so
  // that nothing below can throw once the chains are off the depots.
  std::vector<unsigned char*> slabs;
  std::vector<unsigned char*> freed;
  {
    lock_guard guard(l.slab_lock);
    std::sort(l.slabs.begin(), l.slabs.end(), std::less<>{});
    for (void* s : l.slabs)
      slabs.push_back(static_cast<unsigned char*>(s));
  }
  freed.reserve(slabs.size());
  std::vector<unsigned> free_in(slabs.size(), 0);
  auto slab_of = [&slabs](const free_node* n) -> std::ptrdiff_t {
    const auto* p = reinterpret_cast<const unsigned char*>(n);
    const auto it = std::upper_bound(slabs.begin(), slabs.end(), p, std::less<>{});
    if (it == slabs.begin() || p >= *(it - 1) + slab_bytes) return -1;  // a slab allocated since
    return it - 1 - slabs.begin();
  };

  // Every depot's chains, linked into one list by next_chain.
  free_node* all = nullptr;
  std::size_t total = 0;
  for (std::size_t i = 0; i < l.n; ++i) {
    free_node* list = nullptr;
    {
      lock_guard guard(l.depots[i].lock);
      list = l.depots[i].chains;
      l.depots[i].chains = nullptr;
    }
    while (list != nullptr) {
      free_node* const next = list->next_chain;
      total += list->chain_count;
      list->next_chain = all;
      all = list;
      list = next;
    }
  }
  // Added before they were taken: the count stays at or above what the depots hold.
  l.counts.nodes.fetch_sub(total, std::memory_order_relaxed);
  for (free_node* c = all; c != nullptr; c = c->next_chain) {
    for (free_node* n = c; n != nullptr; n = n->next)
      if (const std::ptrdiff_t s = slab_of(n); s >= 0) ++free_in[static_cast<std::size_t>(s)];
  }

  std::size_t allowed = limit / batch_nodes;
  for (std::size_t s = 0; s < slabs.size() && freed.size() < allowed; ++s) {
    const bool whole =
        mutant::post_trim_frees_partial_slabs ? free_in[s] > 0 : free_in[s] == batch_nodes;
    if (whole) {
      freed.push_back(slabs[s]);
      free_in[s] = ~0u;  // being freed: its nodes are not given back
    }
  }

  // The other nodes back to the depots, in chains of a batch.
  chain out;
  for (free_node* c = all; c != nullptr;) {
    free_node* const next_chain = c->next_chain;
    for (free_node* n = c; n != nullptr;) {
      free_node* const next = n->next;
      const std::ptrdiff_t s = slab_of(n);
      if (s < 0 || free_in[static_cast<std::size_t>(s)] != ~0u) {
        out.push(n);
        if (out.count == batch_nodes) give(std::exchange(out, chain{}));
      }
      n = next;
    }
    c = next_chain;
  }
  give(out);

  if (freed.empty()) return 0;
  {
    lock_guard guard(l.slab_lock);
    // Both sorted by address; slabs allocated since were appended unsorted, and are kept.
    std::erase_if(l.slabs, [&freed](void* s) {
      return std::binary_search(freed.begin(), freed.end(), static_cast<unsigned char*>(s),
                                std::less<>{});
    });
    l.counts.slabs.fetch_sub(freed.size(), std::memory_order_relaxed);
  }
  for (unsigned char* s : freed)
    ::operator delete (s, std::align_val_t{node_align});
#if defined(__GLIBC__)
  ::malloc_trim(0);  // the freed pages back to the system, not only to malloc
#endif
  return freed.size() * slab_bytes;
}

// The automatic trim: an item that looks every trim_interval while the depots hold more
// than trim_arm_nodes, on an unbound queue of its own (never drained: a drain of a shared
// queue would refuse it, or be held up by it). Both never destroyed, as the depots.
void trimmer_tick() noexcept;

struct trimmer_parts {
  workqueue wq{"posted_trim", wq_options{.unbound = true}};
  delayed_work item{"posted-memory-trim", [](delayed_work&) { trimmer_tick(); }};
};

// Queues the trimmer's next look; false if its queue refused (the process is exiting).
bool queue_trimmer() {
  static trimmer_parts* const t = new trimmer_parts;
  return t->wq.queue_delayed(t->item, trim_interval);
}

void disarm_trimmer(free_lists& l) noexcept {
  l.trim_armed.store(false, std::memory_order_seq_cst);
}

// Queues the trimmer (once: trim_armed) when the depots hold more than trim_arm_nodes.
void arm_trimmer(free_lists& l) noexcept {
  if (mutant::post_trim_never_armed) return;
  if (l.counts.nodes.load(std::memory_order_relaxed) <= trim_arm_nodes) return;
  if (l.trim_armed.load(std::memory_order_relaxed) || l.trim_armed.exchange(true)) return;
  if (in_forked_child()) return;  // armed for good: a child's depots are never trimmed by itself
  l.counts.low.store(l.counts.nodes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  try {
    // Refused only when the process is exiting: it then stays armed, and never looks.
    (void)queue_trimmer();
  } catch (...) {
    disarm_trimmer(l);  // no memory for the queue: the next batch given tries again
  }
}

void trimmer_tick() noexcept {
  free_lists& l = lists();
  // The nodes no post took since the last look: a steady load's are kept, a burst's go. (A
  // trim_posted_memory() running now does the work instead.)
  const std::size_t unused = l.counts.low.load(std::memory_order_relaxed);
  if (unused > trim_keep_nodes && l.trim_lock.try_lock()) {
    try {
      (void)trim(l, unused - trim_keep_nodes);
    } catch (const std::bad_alloc&) {  // nothing was taken: the next look tries again
    }
    l.trim_lock.unlock();
  }
  // The next interval's low-water mark starts from what the depots hold now, after the trim.
  l.counts.low.store(l.counts.nodes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (l.counts.nodes.load(std::memory_order_relaxed) > trim_arm_nodes) {
    try {
      if (queue_trimmer()) return;
    } catch (...) {
    }
  }
  disarm_trimmer(l);
  arm_trimmer(l);  // a give that came between the check and the disarm found it armed
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
  if (c.nodes.count >= 2 * batch_nodes) {
    give(c.nodes.take(batch_nodes));
    arm_trimmer(lists());
  }
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

namespace quiesce {

posted_memory get_posted_memory() noexcept {
  detail::free_lists& l = detail::lists();
  return {.node_bytes = detail::node_size,
          .slab_bytes = l.counts.slabs.load(std::memory_order_relaxed) * detail::slab_bytes,
          .free_nodes = l.counts.nodes.load(std::memory_order_relaxed)};
}

std::size_t trim_posted_memory() {
  detail::refuse_in_forked_child("trim_posted_memory");  // the depots' locks may be held
  detail::free_lists& l = detail::lists();
  detail::lock_guard guard(l.trim_lock);
  return detail::trim(l, ~std::size_t{0});
}

}  // namespace quiesce
