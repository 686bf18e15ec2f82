// SPDX-License-Identifier: Apache-2.0
// The three flavours' table (rcu_flavor, internal.hpp): what differs between the default
// (memb), QSBR and Tasks domains - the reader-word encoding, the shared counter, the wake-up
// word, the calling thread's registration storage, and the few policy switches. Everything
// else runs one code path for all three.
#include "internal.hpp"

namespace quiesce::detail {

namespace {

// The calling thread's registry entry per domain (rcu_reader_entry: thread-local storage,
// constant-initialised, trivially destructible).
thread_local constinit rcu_reader_entry memb_entry;
thread_local constinit rcu_reader_entry qsbr_entry;
thread_local constinit rcu_reader_entry tasks_entry;

// Default domain: words hold (grace-period number at the outermost lock << 16) | nesting;
// grace period n waits for an active word whose number is below n.
std::uint64_t memb_counter_for(std::uint64_t gp) noexcept {
  return gp << memb_snapshot_shift;
}
bool memb_holds(std::uint64_t word, std::uint64_t gp) noexcept {
  return (word & memb_nest_mask) != 0 && (word >> memb_snapshot_shift) < gp;
}

// QSBR and Tasks: counters hold 0 while offline, else the shared counter (1 + grace periods
// started) at the thread's last quiescent state; grace period n waits for an online
// counter below n + 1.
std::uint64_t qs_counter_for(std::uint64_t gp) noexcept {
  return gp + 1;
}
bool qs_holds(std::uint64_t word, std::uint64_t gp) noexcept {
  return word != 0 && word < gp + 1;
}

constexpr rcu_flavor flavors[] = {
    {.kind = rcu_kind::memb,
     .name = "rcu",
     .counter = memb.gp_ctr,
     .counter_for = &memb_counter_for,
     .holds = &memb_holds,
     .waiting = memb.waiting,
     .my_word = []() noexcept -> std::atomic<std::uint64_t>& { return tls_memb.word; },
     .my_entry = []() noexcept -> rcu_reader_entry& { return memb_entry; },
     .my_registered = []() noexcept -> bool& { return tls_memb.registered; },
     .marked_sections = true,
     .waits_offline = false,
     .info_reports = false,
     .tasks_stall_timeout = false},
    {.kind = rcu_kind::qsbr,
     .name = "rcu_qsbr",
     .counter = qsbr.gp_ctr,
     .counter_for = &qs_counter_for,
     .holds = &qs_holds,
     .waiting = qsbr.waiting,
     .my_word = []() noexcept -> std::atomic<std::uint64_t>& { return tls_qsbr.ctr; },
     .my_entry = []() noexcept -> rcu_reader_entry& { return qsbr_entry; },
     .my_registered = []() noexcept -> bool& { return tls_qsbr.registered; },
     .marked_sections = false,
     .waits_offline = true,
     .info_reports = false,
     .tasks_stall_timeout = false},
    {.kind = rcu_kind::tasks,
     .name = "rcu_tasks",
     .counter = tasks.gp_ctr,
     .counter_for = &qs_counter_for,
     .holds = &qs_holds,
     .waiting = tasks.waiting,
     .my_word = []() noexcept -> std::atomic<std::uint64_t>& { return tls_tasks.ctr; },
     .my_entry = []() noexcept -> rcu_reader_entry& { return tasks_entry; },
     .my_registered = []() noexcept -> bool& { return tls_tasks.registered; },
     .marked_sections = false,
     .waits_offline = false,  // every voluntary block is a Tasks quiescent state already
     .info_reports = true,
     .tasks_stall_timeout = true},
};

constexpr bool one_row_per_kind() {
  if (std::size(flavors) != std::size(all_rcu_kinds)) return false;
  for (std::size_t i = 0; i < std::size(flavors); ++i) {
    if (flavors[i].kind != all_rcu_kinds[i]) return false;
  }
  return true;
}
static_assert(one_row_per_kind(), "one row per flavour, in all_rcu_kinds' order");

}  // namespace

const rcu_flavor& flavor_of(rcu_kind k) noexcept {
  return flavors[static_cast<int>(k)];
}

}  // namespace quiesce::detail
