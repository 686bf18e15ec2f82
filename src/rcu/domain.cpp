// SPDX-License-Identifier: Apache-2.0
// The three RCU domains: their objects, reader registration (in thread-local storage) and
// unregistration at thread exit, online/offline and quiescent-state reports.
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>
#include <sys/prctl.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../base/blocking_hook.hpp"
#include "../base/futex.hpp"
#include "../base/never_destroyed.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce {
namespace detail {

memb_shared memb;
qs_shared qsbr;
qs_shared tasks;

namespace {

using A = rcu_access;
using detail::never_destroyed;

constexpr std::size_t nr_flavors = std::size(all_rcu_kinds);
constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < nr_flavors; ++i) {
    if (static_cast<std::size_t>(all_rcu_kinds[i]) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "all_rcu_kinds lists the flavours in enum order");
using flavor_indices = std::make_index_sequence<nr_flavors>;

template <std::size_t... I>
constexpr std::array<rcu_domain, nr_flavors> make_domains(std::index_sequence<I...>) {
  return {{A::make(all_rcu_kinds[I])...}};
}

}  // namespace

// One domain object per flavour, indexed by rcu_kind (declared in quiesce/rcu.hpp).
constinit std::array<rcu_domain, nr_flavors> domain_objects = make_domains(flavor_indices{});

namespace {

// Each domain's state, indexed by rcu_kind. Constructed on first use, never destroyed:
// callback threads outlive static destructors.
template <std::size_t... I>
rcu_state* const* make_states(std::index_sequence<I...>) noexcept {
  static never_destroyed<rcu_state> state[] = {
      never_destroyed<rcu_state>(domain_objects[I], flavor_of(all_rcu_kinds[I]))...};
  static rcu_state* const all[] = {&state[I].get()...};
  return all;
}

rcu_state* const* states() noexcept {
  return make_states(flavor_indices{});
}

// Registers membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) once, before main (so the mode
// never changes while readers run). Under ThreadSanitizer readers always use fences.
bool init_membarrier() noexcept {
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  const long supported = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || !(supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  if (::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) {
    return false;
  }
  memb.membarrier.store(true, std::memory_order_seq_cst);
  return true;
#endif
}
const bool membarrier_ready = init_membarrier();

// Registration lives in the thread's own storage (rcu_reader_entry, internal.hpp). A thread
// is unregistered when it exits by a pthread key destructor: glibc runs those after every
// C++ thread_local destructor of the thread (__call_tls_dtors, then the keys), so a read-side
// section entered in any thread_local destructor is still seen by grace periods. A thread
// that registers again from a later key destructor arms the key again and is unregistered
// in the next round.
thread_local constinit int exit_rounds = 0;  // W: key destructor rounds run so far

void on_thread_exit(void*) noexcept;

// Created before main (and on first use by a static initialiser that runs earlier), so its
// index is small and pthread_setspecific never allocates a second-level block.
pthread_key_t exit_key() noexcept {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    if (const int err = ::pthread_key_create(&k, &on_thread_exit); err != 0) {
      die("rcu: cannot create the thread-exit key: %s", std::strerror(err));
    }
    return k;
  }();
  return key;
}
const bool ready_at_load = [] {
  (void)exit_key();
  install_fork_handlers();
  return true;
}();

void wake_writer(std::atomic<std::uint32_t>& waiting) noexcept {
  if (waiting.exchange(0, std::memory_order_seq_cst) != 0) futex_wake_all(waiting);
}

// Puts the calling thread into the registry of domain `k`. Never allocates.
void register_thread(rcu_kind k) noexcept {
  if (exit_rounds >= PTHREAD_DESTRUCTOR_ITERATIONS) {
    die("rcu: a thread registered with %s in its last thread-exit round; it could not be "
        "unregistered",
        state_of(k).name);
  }
  const rcu_flavor& f = flavor_of(k);
  rcu_reader_entry& e = f.my_entry();
  if (const int err = ::pthread_setspecific(exit_key(), &e); err != 0) {
    die("rcu: cannot arm the thread-exit handler: %s", std::strerror(err));
  }
  e.word = &f.my_word();
  this_thread_name_into(e.name);
  if constexpr (mutant::rcu_registration_allocates) {
    static std::atomic<std::size_t> sink{0};
    sink += std::string(e.name, sizeof(e.name)).size();
  }
  if constexpr (mutant::rcu_unregister_early) {
    // The old bug: a thread_local constructed now is destroyed before every thread_local
    // constructed earlier; it drops the entry but leaves the thread "registered".
    struct early {
      rcu_kind k = rcu_kind::memb;
      bool armed = false;
      ~early() {
        if (!armed) return;
        rcu_state& s = state_of(k);
        lock_guard g(s.registry_lock);
        if (flavor_of(k).my_entry().node.linked()) s.readers.erase(&flavor_of(k).my_entry());
      }
    };
    thread_local early early_of[std::size(all_rcu_kinds)];
    early& mine = early_of[static_cast<int>(k)];
    mine.k = k;
    mine.armed = true;
  }
  rcu_state& st = state_of(k);
  lock_guard guard(st.registry_lock);
  e.tid = this_thread_tid();
  // Default domain: out of memb_unregistered (which a writer would read as a section
  // begun before every grace period) before a writer can see the entry.
  if (f.marked_sections) f.my_word().store(0, std::memory_order_relaxed);
  st.readers.push_back(&e);
  f.my_registered() = true;
}

// QSBR / Tasks: online = the counter's value now (holds grace periods from here on);
// offline = 0 (holds none), waking a writer that may wait for us.
void qs_online(rcu_kind k) noexcept {
  const rcu_flavor& f = flavor_of(k);
  f.my_word().store(f.counter.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void qs_offline(rcu_kind k) noexcept {
  const rcu_flavor& f = flavor_of(k);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  f.my_word().store(0, std::memory_order_seq_cst);
  wake_writer(f.waiting);
}

void unregister_thread(rcu_kind k) noexcept {
  const rcu_flavor& f = flavor_of(k);
  if (!f.my_registered()) return;
  if (!f.marked_sections) qs_offline(k);
  rcu_state& st = state_of(k);
  {
    lock_guard guard(st.registry_lock);
    if (f.my_entry().node.linked()) st.readers.erase(&f.my_entry());
  }
  f.my_registered() = false;  // a later lock()/online registers again
  if (f.marked_sections && !mutant::memb_unregister_keeps_word) {
    f.my_word().store(memb_unregistered, std::memory_order_relaxed);  // ... by lock()'s slow path
  }
  wake_writer(f.waiting);  // our exit may be what a waiting grace period needs
}

void on_thread_exit(void*) noexcept {
  ++exit_rounds;
  for (rcu_kind k : all_rcu_kinds)
    unregister_thread(k);
}

rcu_kind kind_of(const rcu_domain& d) noexcept {
  return A::kind(d);
}

}  // namespace

rcu_state& state_of(rcu_kind k) noexcept {
  return *states()[static_cast<int>(k)];
}

rcu_state& state_of(rcu_domain& d) noexcept {
  return state_of(kind_of(d));
}

void this_thread_name_into(char (&out)[thread_name_len]) noexcept {
  char buf[thread_name_len] = {};
  if (::prctl(PR_GET_NAME, buf) != 0) buf[0] = '\0';
  buf[thread_name_len - 1] = '\0';
  std::memcpy(out, buf, sizeof(buf));
}

void reset_registry_in_child(rcu_state& st) noexcept QUIESCE_REQUIRES(st.registry_lock) {
  // Only the forking thread exists in the child: every other entry names a thread that is
  // gone (its storage is still mapped, never to change again).
  rcu_reader_entry* mine = &st.flavor.my_entry();
  for (rcu_reader_entry* r = st.readers.front(); r && !mutant::rcu_child_keeps_readers;) {
    rcu_reader_entry* const next = st.readers.next(r);
    if (r != mine) st.readers.erase(r);
    r = next;
  }
  if (mine->node.linked()) mine->tid = this_thread_tid();
  st.flavor.waiting.store(0, std::memory_order_relaxed);
}

std::span<rcu_state* const> all_states() noexcept {
  return {states(), nr_flavors};
}

[[noreturn]] void memb_nesting_overflow() noexcept {
  die("rcu_default_domain().lock() nested %llu levels deep: the reader word holds at most "
      "%llu; aborting (a deeper reader would look idle to a grace period)",
      static_cast<unsigned long long>(memb_nest_mask + 1),
      static_cast<unsigned long long>(memb_nest_mask));
}

void memb_lock_slow() noexcept {
  memb_reader& r = tls_memb;
  if (r.registered) memb_nesting_overflow();
  register_thread(rcu_kind::memb);  // the word is 0 now: no section open
  memb_enter_outermost(r);
}

void memb_wake_writer() noexcept {
  wake_writer(memb.waiting);
}

void qs_report_slow(qs_shared& shared, qs_reader& reader) noexcept {
  if (reader.ctr.load(std::memory_order_relaxed) == 0) return;  // offline: nothing to report
  std::atomic_thread_fence(std::memory_order_seq_cst);          // our reads are done
  reader.ctr.store(shared.gp_ctr.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (shared.waiting.load(std::memory_order_relaxed)) wake_writer(shared.waiting);
}

}  // namespace detail

using detail::rcu_access;
using detail::rcu_kind;

const char* rcu_domain::name() const noexcept {
  return detail::flavor_of(kind_).name;
}

void rcu_thread_online(rcu_domain& domain) {
  const rcu_kind k = detail::kind_of(domain);
  const detail::rcu_flavor& f = detail::flavor_of(k);
  if (f.marked_sections) {
    throw std::invalid_argument("domain: the default domain registers its readers itself");
  }
  if (!f.my_registered()) detail::register_thread(k);
  detail::qs_online(k);
}

void rcu_thread_offline(rcu_domain& domain) {
  const rcu_kind k = detail::kind_of(domain);
  const detail::rcu_flavor& f = detail::flavor_of(k);
  if (f.marked_sections || !f.my_registered()) return;
  detail::qs_offline(k);
}

bool rcu_thread_is_online(rcu_domain& domain) noexcept {
  const detail::rcu_flavor& f = detail::flavor_of(detail::kind_of(domain));
  if (f.marked_sections) return f.my_registered();
  return f.my_word().load(std::memory_order_relaxed) != 0;
}

void cond_resched() noexcept {
  // The kernel yields only when the scheduler asks; user space cannot see that flag
  // cheaply, so yield at most once per millisecond of calls (a yield with nobody else
  // runnable returns at once).
  thread_local std::uint64_t last_yield_ns = 0;
  const std::uint64_t now = stat_ns();
  if (now - last_yield_ns >= 1'000'000) {
    last_yield_ns = now;
    ::sched_yield();
  }
}

void cond_resched_tasks_qs() noexcept {
  detail::qs_report(detail::tasks, detail::tls_tasks);
  cond_resched();
}

rcu_voluntary_block::rcu_voluntary_block() noexcept
    : was_online_(detail::tls_tasks.ctr.load(std::memory_order_relaxed) != 0) {
  const detail::blocking_hook& hook = detail::tls_blocking_hook;
  if (hook.enter) hook.enter(hook.ctx);
  if (was_online_) detail::qs_offline(rcu_kind::tasks);
}

rcu_voluntary_block::~rcu_voluntary_block() {
  if (was_online_) detail::qs_online(rcu_kind::tasks);
  const detail::blocking_hook& hook = detail::tls_blocking_hook;
  if (hook.leave) hook.leave(hook.ctx);
}

}  // namespace quiesce
