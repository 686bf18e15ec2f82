// Internal state of the RCU domains (src/rcu). Not installed.
//
// Each domain has: a registry of reader threads (pointers to their thread-local words), a
// grace-period engine serialised by gp_mutex (concurrent rcu_synchronize callers share
// grace periods through gp_started/gp_completed), a callback queue with its own thread,
// and the list of threads blocked waiting on it (for the hung-waiter report).
// Lock order: gp_mutex -> registry_lock; waiters_lock and stats_lock are leaves.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "quiesce/clock.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/list.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::detail {

enum class rcu_kind { memb, qsbr, tasks };

// One registered thread of one domain.
struct rcu_reader_entry {
  std::atomic<std::uint64_t>* word = nullptr;  // I: the thread's TLS word or counter
  pid_t tid = 0;                               // I
  std::string name;                            // I
  list_node node;                              // L: registry_lock
};

// A thread blocked in rcu_synchronize / rcu_barrier (on its stack while it waits).
struct rcu_waiter {
  pid_t tid = 0;
  std::string name;
  std::uint64_t since_ns = 0;
  bool reported = false;  // L: waiters_lock
  list_node node;         // L: waiters_lock
};

struct rcu_callbacks {
  std::atomic<rcu_head*> head{nullptr};  // A: new callbacks, a Treiber stack (newest first)
  std::atomic<std::uint32_t> wake{0};    // A: bumped to wake the thread
  std::atomic<bool> sleeping{false};     // A: seq_cst with head (Dekker)
  std::once_flag started;
  std::thread thread;  // started once, never joined (see rcu.hpp)
  std::atomic<std::uint64_t> queued{0}, invoked{0}, batches{0}, exceptions{0};  // A
};

struct rcu_state {
  rcu_state(rcu_domain& d, const char* n, rcu_kind k) : domain(d), name(n), kind(k) {}
  rcu_domain& domain;   // I
  const char* name;     // I
  const rcu_kind kind;  // I

  std::mutex registry_lock;
  intrusive_list<rcu_reader_entry, &rcu_reader_entry::node> readers;  // L: registry_lock

  std::mutex gp_mutex;                         // one grace period at a time
  std::atomic<std::uint64_t> gp_started{0};    // A: written under gp_mutex
  std::atomic<std::uint64_t> gp_completed{0};  // A: written under gp_mutex
  std::atomic<std::uint64_t> gp_start_ns{0};   // A: start of the grace period in progress

  std::mutex stats_lock;
  histogram gp_duration_ns;                                             // L: stats_lock
  std::atomic<std::uint64_t> sync_calls{0}, sync_shared{0}, misuse{0};  // A
  std::atomic<std::uint64_t> stall_infos{0}, stalls{0}, hung{0};        // A

  std::mutex waiters_lock;
  intrusive_list<rcu_waiter, &rcu_waiter::node> waiters;  // L: waiters_lock

  rcu_callbacks callbacks;

  // W: the watchdog thread only.
  std::uint64_t info_gp = 0, next_info_ns = 0, info_interval_ns = 0, stalled_gp = 0;
};

// Keeps a blocked caller listed (for the hung-waiter report) for its scope.
class listed_waiter {
 public:
  explicit listed_waiter(rcu_state& st) : st_(st) {
    // Cached per thread: two syscalls per grace period otherwise.
    thread_local const pid_t tid = this_thread_tid();
    thread_local const std::string name = this_thread_name();
    w_.tid = tid;
    w_.name = name;
    w_.since_ns = now_ns();
    std::lock_guard guard(st_.waiters_lock);
    st_.waiters.push_back(&w_);
  }
  ~listed_waiter() {
    std::lock_guard guard(st_.waiters_lock);
    st_.waiters.erase(&w_);
  }

 private:
  rcu_state& st_;
  rcu_waiter w_;
};

// The value a reader word is compared with for grace period `gp`: the period's number for
// the default domain (words hold the number seen at lock), gp + 1 for QSBR/Tasks (counters
// hold the grace-period counter, 1 + periods started, at the last quiescent state).
inline std::uint64_t gp_target(rcu_kind kind, std::uint64_t gp) noexcept {
  return kind == rcu_kind::memb ? gp : gp + 1;
}

// Whether a reader word holds the grace period of `target` (see rcu.hpp for encodings).
inline bool holds_grace_period(rcu_kind kind, std::uint64_t word, std::uint64_t target) noexcept {
  if (kind == rcu_kind::memb) {
    return (word & memb_nest_mask) != 0 && (word >> memb_snapshot_shift) < target;
  }
  return word != 0 && word < target;
}

// A QSBR thread that is online while it waits for a QSBR grace period would wait for
// itself: it goes offline for the wait (liburcu does the same).
class offline_for_wait {
 public:
  explicit offline_for_wait(rcu_state& st)
      : domain_(st.kind == rcu_kind::qsbr && rcu_thread_is_online(st.domain) ? &st.domain
                                                                             : nullptr) {
    if (domain_) rcu_thread_offline(*domain_);
  }
  ~offline_for_wait() {
    if (domain_) rcu_thread_online(*domain_);
  }

 private:
  rcu_domain* domain_;
};

rcu_state& state_of(rcu_domain& d) noexcept;
rcu_state* const* all_states(std::size_t& n) noexcept;  // the three domains

// Grace periods (grace_period.cpp).
void synchronize(rcu_state& st) noexcept;

// The watchdog's RCU checks (stall.cpp).
void rcu_watchdog_install() noexcept;

}  // namespace quiesce::detail
