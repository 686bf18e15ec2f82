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
// The 4-byte fields are paired (flags with color, timer_cpu with active), so that on LP64
// this is 168 bytes and class work 256: a posted item's node is four cache lines, not five
// (src/wq/post.cpp; a post's poster and worker each touch one line less).
struct work_state {
  explicit work_state(const char* trace) noexcept : trace_name(trace) {}
  work_state(const work_state&) = delete;
  work_state& operator=(const work_state&) = delete;

  const char* const trace_name;                      // I: the item's interned name for trace events
  std::atomic<std::uint32_t> flags{0};               // A: PENDING and the disable count
  int color = 0;                                     // P: flush color it is counted in
  std::atomic<std::uint64_t> last_id{0};             // A: instances ever queued (id of the newest)
  std::atomic<std::uint64_t> pending_id{0};          // A: id of the queued instance, 0 if none
  std::atomic<std::uint64_t> running_id{0};          // A: id of the running instance, 0 if none
  std::atomic<pool*> queued_pool{nullptr};           // A: pool whose list holds the item
  std::atomic<active_domain*> inactive_in{nullptr};  // A: domain holding it inactive
  std::atomic<pool*> last_pool{nullptr};             // A: pool that last ran it
  // L(pool) on a worklist or scheduled list; L(domain) on an inactive list.
  list_node node;
  void* on_list = nullptr;           // L(pool): the pool list holding it
  pwq* pwq_of = nullptr;             // P: the queue it was queued through
  worker* current_worker = nullptr;  // L(pool of last_pool): the worker running it
  std::uint64_t queued_ns = 0;       // P
  std::uint64_t activated_ns = 0;    // Q (see the legend): when it became active
  // Q: the next (older) item on its pool's incoming list, while it is there
  quiesce::work* incoming_next = nullptr;
  // Delayed work only: the timer entry, L(timer).
  std::uint64_t timer_deadline_ns = 0;
  std::uint64_t timer_seq = 0;  // 0 = not armed
  wq_impl* timer_wq = nullptr;
  int timer_cpu = -1;
  bool active = false;  // P, or L(domain) while inactive: counted in nr_active
};

}  // namespace quiesce::detail
