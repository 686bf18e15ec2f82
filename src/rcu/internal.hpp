// SPDX-License-Identifier: Apache-2.0
// Internal state of the RCU domains (src/rcu). Not installed.
//
// Each domain has: a registry of reader threads (entries in the threads' own thread-local
// storage), a grace-period engine serialised by gp_mutex (concurrent rcu_synchronize
// callers share grace periods through gp_started/gp_completed), a callback queue with its
// own thread, and the list of threads blocked waiting on it (for the hung-waiter report).
// Lock order: fork lock -> gp_mutex -> registry_lock; waiters_lock and stats_lock are leaves.
//
// Protection legend (docs/DESIGN.md, "Protection legend"): I, A, L(lock) - QUIESCE_GUARDED_BY
// where the lock is a member of the same object - W (the owning thread: the registering
// thread, the callback thread, the forking thread) and D (the watchdog thread).
//
// Nothing on the paths of lock()/unlock(), retire(), rcu_synchronize() and rcu_barrier()
// allocates from the heap: entries and waiter records live in thread-local storage or on
// the caller's stack, and the callback threads start when the library loads.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <thread>

#include "../base/adaptive_budget.hpp"
#include "../base/cache_line.hpp"
#include "../base/die.hpp"
#include "../base/list.hpp"
#include "../base/mutant.hpp"
#include "../base/mutex.hpp"
#include "../watchdog/plugin.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"

namespace quiesce::detail {

// ---- deliberately broken builds (tests/mutants) ------------------------------------------
// Each mutant removes one RCU guarantee; the RCU test suite must fail on every one. Only
// the mutant builds define these macros. (The torture test's own two broken builds are in
// tests/stress.)
namespace mutant {
// rcu_barrier queues its marker but does not wait
inline constexpr bool rcu_barrier_no_wait = QUIESCE_MUTANT(RCU_BARRIER_NO_WAIT);
// a caller of synchronize whose grace period another caller runs waits for gp_mutex before
// it returns (as until 2026-12: a caller could wait for as long as others kept taking the
// mutex back - 10 ms with two callers here)
inline constexpr bool rcu_sync_waits_for_mutex = QUIESCE_MUTANT(RCU_SYNC_WAITS_FOR_MUTEX);
// every callback queued while the callback thread is still marked asleep wakes it (a
// system call each until it runs, as until 2026-12)
inline constexpr bool rcu_wakes_every_enqueue = QUIESCE_MUTANT(RCU_WAKES_EVERY_ENQUEUE);
// a fork child keeps the parent's other readers
inline constexpr bool rcu_child_keeps_readers = QUIESCE_MUTANT(RCU_CHILD_KEEPS_READERS);
// registering copies the name to the heap
inline constexpr bool rcu_registration_allocates = QUIESCE_MUTANT(RCU_REGISTRATION_ALLOCATES);
// a thread leaves the registry in a thread_local destructor, before earlier ones run
inline constexpr bool rcu_unregister_early = QUIESCE_MUTANT(RCU_UNREGISTER_EARLY);
// an unregistered thread's default-domain word keeps 0, so a lock() after unregistration
// (a later thread-exit round) skips registering
inline constexpr bool memb_unregister_keeps_word = QUIESCE_MUTANT(MEMB_UNREGISTER_KEEPS_WORD);
// a failing membarrier falls back to a fence (readers keep compiler barriers)
inline constexpr bool rcu_membarrier_fallback = QUIESCE_MUTANT(RCU_MEMBARRIER_FALLBACK);
// a cookie's grace-period number is read with no full fence after the caller's removal
inline constexpr bool rcu_cookie_no_fence = QUIESCE_MUTANT(RCU_COOKIE_NO_FENCE);
// a retire past the callback limit never waits for the backlog to drain
inline constexpr bool rcu_flood_uncapped = QUIESCE_MUTANT(RCU_FLOOD_UNCAPPED);
}  // namespace mutant

// Whether the calling thread is inside a read-side section of the default domain. (An
// unregistered thread's word is memb_unregistered, which reads as nested: not a section.)
inline bool memb_in_section() noexcept {
  return tls_memb.registered &&
         (tls_memb.word.load(std::memory_order_relaxed) & memb_nest_mask) != 0;
}

// Linux's TASK_COMM_LEN: a thread name and its terminating NUL.
inline constexpr std::size_t thread_name_len = 16;

// One registered thread of one domain. Lives in the thread's thread-local storage: constant-
// initialised and trivially destructible, so it needs no allocation and stays valid until
// the thread is gone - after every thread_local destructor, when the thread's exit handler
// (a pthread key destructor, domain.cpp) unregisters it.
struct rcu_reader_entry {
  std::atomic<std::uint64_t>* word = nullptr;  // I: the thread's TLS word or counter
  pid_t tid = 0;                    // L(rcu_state::registry_lock); a fork child rewrites it
  char name[thread_name_len] = {};  // I
  list_node node;                   // L(rcu_state::registry_lock)
};

// A thread blocked in rcu_synchronize / rcu_barrier (on its stack while it waits).
struct rcu_waiter {
  pid_t tid = 0;               // I (its name is read at report time)
  std::uint64_t since_ns = 0;  // I
  bool reported = false;       // L(rcu_state::waiters_lock)
  list_node node;              // L(rcu_state::waiters_lock)
};

// What differs between the three domains; everything else - the registry, the grace-period
// engine, callbacks, the stall detector, fork - is one code path that reads this table
// (as kernel/rcu/tasks.h runs every Tasks flavour through one engine with per-flavour
// callbacks). The tables are in flavor.cpp; see rcu.hpp for the reader-word encodings.
struct rcu_flavor {
  rcu_kind kind;
  const char* name;  // the domain's name in reports
  // The counter readers copy, and the value it takes for grace period `gp`.
  std::atomic<std::uint64_t>& counter;
  std::uint64_t (*counter_for)(std::uint64_t gp) noexcept;
  // Whether a reader word (its thread's, loaded with acquire) holds grace period `gp`.
  bool (*holds)(std::uint64_t word, std::uint64_t gp) noexcept;
  std::atomic<std::uint32_t>& waiting;  // a writer sleeps on it; readers wake it
  // The calling thread's reader word, registry entry and registered flag.
  std::atomic<std::uint64_t>& (*my_word)() noexcept;
  struct rcu_reader_entry& (*my_entry)() noexcept;
  bool& (*my_registered)() noexcept;
  // Readers mark sections with lock()/unlock() (the default domain): the writer's barrier
  // may be membarrier, a wait inside a section is detectable, and threads register
  // themselves. Otherwise threads go online/offline and report quiescent states.
  bool marked_sections;
  // A caller online in this domain waits offline (QSBR; for Tasks every voluntary block
  // already is a quiescent state).
  bool waits_offline;
  // The stall detector: informational "grace period ... is M ms old" reports (Tasks), and
  // which watchdog_config field is the stall timeout.
  bool info_reports;
  bool tasks_stall_timeout;
};
const rcu_flavor& flavor_of(rcu_kind k) noexcept;

// A thread is online or offline in a flavour without marked sections (QSBR, Tasks): fork
// takes the forking thread offline there and back online after.
inline bool has_online_state(const rcu_flavor& f) noexcept {
  return !f.marked_sections;
}

// The calling thread's name, without allocating (one prctl).
void this_thread_name_into(char (&out)[thread_name_len]) noexcept;

// A noexcept primitive that cannot proceed ends the process through die() (liburcu's
// urcu_die; src/base/die.hpp).

// Laid out by writer (base/cache_line.hpp): a retire writes only the first line; the
// callback thread's per-callback and per-batch stores go to the third; the second holds
// what a retire reads and others write rarely. (One line for all of them cost a transfer
// of the line per retire while the thread ran a batch.)
struct rcu_callbacks {
  // Written by every queueing thread.
  alignas(cache_line) std::atomic<rcu_head*> head{nullptr};  // A: a Treiber stack (newest first)
  std::atomic<std::uint64_t> queued{0};                      // A
  std::atomic<std::uint32_t> wake{0};                        // A: bumped to wake the thread
  std::atomic<std::uint64_t> wakeups{0};  // A (relaxed): wake-ups sent, for the tests

  // Read by every queueing thread; written once per sleep, batch or start.
  // A: seq_cst with head (Dekker); the queuer that wakes the thread clears it (takes the sleep)
  alignas(cache_line) std::atomic<bool> sleeping{false};
  std::atomic<std::uint64_t> sleeps{0};  // A (relaxed): sleeps begun, for the tests
  std::atomic<bool> started{false};      // A: the thread runs (never joined; see rcu.hpp)
  // A flood (rcu.hpp, set_rcu_callback_limit): callbacks that have run to completion;
  // threads waiting for the backlog to drain, and the word they sleep on, bumped (and
  // woken) after each batch while any waits. Dekker between a waiter (waiters, then
  // finished) and the thread (finished, then waiters), all seq_cst.
  std::atomic<std::uint64_t> finished{0};         // A
  std::atomic<std::uint32_t> backlog_waiters{0};  // A
  std::atomic<std::uint32_t> drained{0};          // A

  // The callback thread's. Fork (fork.cpp): `pause` asks it to stop before its next
  // callback; `busy` says it may be inside one (Dekker, seq_cst). `in_hand` is the rest of
  // the batch it took and has not run (oldest first), for a fork child to queue again:
  // stored whenever `busy` goes to 0, which is when a forking thread reads it.
  alignas(cache_line) std::atomic<std::uint32_t> pause{0};  // A
  std::atomic<std::uint32_t> busy{0};                       // A
  // W: the callback thread's; a fork child handler reads it while the thread is paused.
  std::atomic<rcu_head*> in_hand{nullptr};
  std::atomic<std::uint64_t> invoked{0}, batches{0}, exceptions{0};  // A
  mutex start_lock{"rcu callbacks.start_lock"};  // serialises starting the thread
};

// How many scans a grace period spins for its last holdouts before it sleeps
// (wait_for_readers). A reader that is running reports within a few scans; one that is not
// (preempted - on a busy machine perhaps by the very thread that waits) reports only after
// the waiter gives up the CPU, and every scan spun meanwhile only delays it. So the budget
// halves each time spinning did not catch the last holdout and doubles each time it did,
// within [min, max] (liburcu always spins 100). Measured by bench_rcu's busy-reader rows.
using gp_spin_budget = adaptive_budget<int, 2, 100>;

struct rcu_state {
  rcu_state(rcu_domain& d, const rcu_flavor& f)
      : domain(d), flavor(f), name(f.name), kind(f.kind) {}
  rcu_domain& domain;        // I
  const rcu_flavor& flavor;  // I
  const char* name;          // I: flavor.name
  const rcu_kind kind;       // I: flavor.kind

  mutex registry_lock{"rcu registry_lock"};
  intrusive_list<rcu_reader_entry, &rcu_reader_entry::node> readers
      QUIESCE_GUARDED_BY(registry_lock);

  mutex gp_mutex{"rcu gp_mutex"};              // one grace period at a time
  std::atomic<std::uint64_t> gp_started{0};    // A: written under gp_mutex
  std::atomic<std::uint64_t> gp_completed{0};  // A: written under gp_mutex
  // A (seq_cst): callers of synchronize that sleep until the grace period they need has
  // ended or gp_mutex is free, and the word they sleep on, bumped (and woken) at every
  // release of gp_mutex while any sleeps (release_gp_mutex). Dekker: a sleeper counts
  // itself, reads the word, then (a fence) reads gp_completed and tries the mutex; a releaser
  // unlocks, then (a fence) reads the count.
  std::atomic<std::uint32_t> gp_sleepers{0};
  std::atomic<std::uint32_t> gp_released{0};
  // A: when the grace period in progress first found a holdout (its timed start); 0 until
  // then, and for one that finds none
  std::atomic<std::uint64_t> gp_start_ns{0};
  gp_spin_budget spin QUIESCE_GUARDED_BY(gp_mutex);

  mutex stats_lock{"rcu stats_lock"};
  histogram gp_duration_ns QUIESCE_GUARDED_BY(stats_lock);  // grace periods that waited
  // A: written under gp_mutex only (a load and a store): grace periods whose first scan
  // found no holdout, not timed - 0 ns in rcu_stats' histogram
  std::atomic<std::uint64_t> gp_untimed{0};
  // A: sync_calls and sync_shared are written under gp_mutex only (a load and a store),
  // read without it; sync_served counts the calls another caller's grace period served
  // while they slept for the mutex, which return without it (relaxed adds)
  std::atomic<std::uint64_t> sync_calls{0}, sync_shared{0}, sync_served{0}, misuse{0};
  std::atomic<std::uint64_t> stall_infos{0}, stalls{0}, hung{0};  // A

  mutex waiters_lock{"rcu waiters_lock"};
  intrusive_list<rcu_waiter, &rcu_waiter::node> waiters QUIESCE_GUARDED_BY(waiters_lock);

  rcu_callbacks callbacks;

  // D: the watchdog thread only.
  std::uint64_t info_gp = 0, next_info_ns = 0, info_interval_ns = 0, stalled_gp = 0;
};

// A caller of rcu_synchronize or rcu_barrier as the watchdog sees it, made visible only
// once it is about to block: list() puts it on the hung-waiter list, hold() keeps the
// watchdog awake for the stall detector while its grace period blocks. A wait that ends
// without blocking pays for neither (no lock, no clock read, no wake-up of the watchdog
// thread); both are undone when the scope ends. Touched by its own thread only.
// Releases gp_mutex and wakes the callers of synchronize sleeping for it (rcu_state::
// gp_sleepers): every release of gp_mutex goes through here.
void release_gp_mutex(rcu_state& st) noexcept QUIESCE_RELEASE(st.gp_mutex);

class blocking_waiter {
 public:
  explicit blocking_waiter(rcu_state& st) noexcept : st_(st) {}
  blocking_waiter(const blocking_waiter&) = delete;
  blocking_waiter& operator=(const blocking_waiter&) = delete;
  ~blocking_waiter() {
    if (held_) watchdog_release();
    if (listed_) {
      lock_guard guard(st_.waiters_lock);
      st_.waiters.erase(&w_);
    }
  }
  void list() noexcept {
    if (listed_) return;
    listed_ = true;
    w_.tid = this_thread_tid();
    w_.since_ns = stat_ns();
    lock_guard guard(st_.waiters_lock);
    st_.waiters.push_back(&w_);
  }
  void hold() noexcept {
    if (held_) return;
    held_ = true;
    watchdog_hold();
  }

 private:
  rcu_state& st_;
  rcu_waiter w_;
  bool listed_ = false;
  bool held_ = false;
};

// A QSBR thread that is online while it waits for a QSBR grace period would wait for
// itself: it goes offline for the wait (liburcu does the same).
class offline_for_wait {
 public:
  explicit offline_for_wait(rcu_state& st)
      : domain_(st.flavor.waits_offline && rcu_thread_is_online(st.domain) ? &st.domain : nullptr) {
    if (domain_) rcu_thread_offline(*domain_);
  }
  ~offline_for_wait() {
    if (domain_) rcu_thread_online(*domain_);
  }

 private:
  rcu_domain* domain_;
};

rcu_state& state_of(rcu_domain& d) noexcept;
// Queues a callback node, never waiting (rcu_enqueue waits first under a flood).
void enqueue_node(rcu_state& st, rcu_head* head) noexcept;
rcu_state& state_of(rcu_kind k) noexcept;
std::span<rcu_state* const> all_states() noexcept;  // the three domains

// Grace periods (grace_period.cpp): wait for one; the number of the first grace period that
// starts after the call (a full fence first).
void synchronize(rcu_state& st) noexcept;
std::uint64_t rcu_first_grace_period_from_now(const rcu_state& st) noexcept;

// The watchdog's RCU checks (stall.cpp).
void rcu_watchdog_install() noexcept;

// Callback threads (callbacks.cpp): start (0, or the error creating the thread); and,
// for fork.cpp, stop them before their next callback / let them go on; in a fork child,
// queue again what they held and start new ones.
int start_callback_thread(rcu_state& st) noexcept;
void pause_callbacks_for_fork(rcu_state& st) noexcept;
void resume_callbacks_after_fork(rcu_state& st) noexcept;
void restart_callbacks_in_child(rcu_state& st) noexcept;
bool on_callback_thread_of(const rcu_state& st) noexcept;

// Registry and readers (domain.cpp), for fork.cpp: in a fork child only the forking thread
// exists; drop every other thread's entry and reset the wake-up words.
void reset_registry_in_child(rcu_state& st) noexcept QUIESCE_REQUIRES(st.registry_lock);

// Installs the fork handlers (fork.cpp), once; called when the library loads.
void install_fork_handlers() noexcept;

}  // namespace quiesce::detail
