// SPDX-License-Identifier: Apache-2.0
// quiesce/detail/work_state.hpp - the runtime state of one work item: what the kernel's
// struct work_struct keeps in its data word and list entry, plus what quiesce's pools need
// to find, account and time an instance. Internal: installed only because class work
// embeds it and must be complete; src/wq alone reads or writes it (through
// detail::wq_access::state), and its layout may change in any release.
#pragma once

#include <atomic>
#include <cstdint>

#include "quiesce/detail/list_node.hpp"

namespace quiesce {
class work;
}  // namespace quiesce

namespace quiesce::detail {

struct pool;
struct pwq;
struct worker;
struct active_domain;
struct wq_impl;

// Shared between queuers, workers, the timer and cancellers; each field names what
// protects it in the legend of docs/DESIGN.md ("Protection legend": I, A, L(x), P = written
// by the owner of the pending bit before the item is listed).
// Laid out by who writes what per instance (LP64; class work, 240 bytes, puts this at offset
// 72, after its vtable pointer, function and name, which nothing writes after construction):
//  - the worker's part comes first, filling the rest of the item's second cache line;
//  - the queuer's part is the third line, whole: a queueing writes that line alone, and the
//    worker that runs the instance writes it back (the pending bit) and its own line;
//  - the cold part (trace name, inactive wait, delayed work's timer) is the fourth.
// So a queueing on one CPU and the run on another move two lines of the item between them,
// not four (lines of the object: a posted node is line-aligned, an item from plain `new`
// 16-aligned, whose parts may straddle one line more; issue 29: with last_pool on the queuer's
// line, unbound empty items 1.15-1.18x, posted lambdas 1.02-1.17x; docs/workqueue.md). A test
// (WorkLayout) holds the layout; a posted item's node stays four lines (src/wq/post.cpp).
struct work_state {
  explicit work_state(const char* trace) noexcept : trace_name(trace) {}
  work_state(const work_state&) = delete;
  work_state& operator=(const work_state&) = delete;

  // The worker's line (with class work's name_): written when an instance starts and ends;
  // queuers do not read it.
  std::atomic<std::uint64_t> running_id{0};  // A: id of the running instance, 0 if none
  worker* current_worker = nullptr;          // L(pool of last_pool): the worker running it
  void* on_list = nullptr;                   // L(pool): the pool list holding it
  // L(pool) on a worklist or scheduled list; L(domain) on an inactive list.
  list_node node;
  // Q (see the legend): when it became active, if after its queueing (activated_late)
  std::uint64_t activated_ns = 0;

  // The queuer's line: everything a queueing reads or writes, which the worker then reads.
  std::atomic<std::uint32_t> flags{0};  // A: PENDING and the disable count
  std::uint8_t color = 0;               // P: flush color it is counted in (0, 1)
  bool active = false;                  // P, or L(domain) while inactive: counted in nr_active
  // Q: it became active after its queueing (it waited inactive): at activated_ns, not at
  // queued_ns. Activation at queueing, the common case, writes no time of its own.
  bool activated_late = false;
  std::atomic<std::uint64_t> last_id{0};     // A: instances ever queued (id of the newest)
  std::atomic<std::uint64_t> pending_id{0};  // A: id of the queued instance, 0 if none
  pwq* pwq_of = nullptr;                     // P: the queue it was queued through
  std::uint64_t queued_ns = 0;               // P
  std::atomic<pool*> queued_pool{nullptr};   // A: pool whose list holds the item
  // Q: the next (older) item on its pool's incoming list, while it is there
  quiesce::work* incoming_next = nullptr;
  // A: pool that last ran it. The worker writes it only when it changes, so that it stays
  // on the line the queuer has anyway.
  std::atomic<pool*> last_pool{nullptr};

  // Cold: read when tracing, while inactive, and by delayed work's timer.
  const char* const trace_name;                      // I: the item's interned name for trace events
  std::atomic<active_domain*> inactive_in{nullptr};  // A: domain holding it inactive
  // Delayed work only: the timer entry, L(timer).
  std::uint64_t timer_deadline_ns = 0;
  std::uint64_t timer_seq = 0;  // 0 = not armed
  wq_impl* timer_wq = nullptr;
  int timer_cpu = -1;
};

}  // namespace quiesce::detail
