// The three RCU domains: their objects, reader registration, online/offline and
// quiescent-state reports.
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

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

rcu_domain default_domain_object = A::make(A::memb);
rcu_domain qsbr_domain_object = A::make(A::qsbr);
rcu_domain tasks_domain_object = A::make(A::tasks);

// Constructed on first use, never destroyed: callback threads outlive static destructors.
rcu_state* const* states() noexcept {
  static never_destroyed<rcu_state> memb_state(default_domain_object, "rcu", rcu_kind::memb);
  static never_destroyed<rcu_state> qsbr_state(qsbr_domain_object, "rcu_qsbr", rcu_kind::qsbr);
  static never_destroyed<rcu_state> tasks_state(tasks_domain_object, "rcu_tasks", rcu_kind::tasks);
  static rcu_state* const all[3] = {&memb_state.get(), &qsbr_state.get(), &tasks_state.get()};
  return all;
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

// Unregisters the thread from a domain when it exits (taking it offline first).
struct registration {
  rcu_state* st = nullptr;
  rcu_reader_entry entry;
  ~registration();
};

thread_local registration memb_registration;
thread_local registration qsbr_registration;
thread_local registration tasks_registration;

void wake_writer(std::atomic<std::uint32_t>& waiting) noexcept {
  if (waiting.exchange(0, std::memory_order_seq_cst) != 0) futex_wake_all(waiting);
}

void register_thread(rcu_state& st, registration& reg, std::atomic<std::uint64_t>& word) {
  reg.st = &st;
  reg.entry.word = &word;
  reg.entry.tid = this_thread_tid();
  reg.entry.name = this_thread_name();
  std::lock_guard guard(st.registry_lock);
  st.readers.push_back(&reg.entry);
}

qs_shared& shared_of(rcu_kind k) noexcept {
  return k == rcu_kind::qsbr ? qsbr : tasks;
}
qs_reader& tls_of(rcu_kind k) noexcept {
  return k == rcu_kind::qsbr ? tls_qsbr : tls_tasks;
}

void qs_online(rcu_kind k) noexcept {
  qs_shared& shared = shared_of(k);
  qs_reader& r = tls_of(k);
  r.ctr.store(shared.gp_ctr.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void qs_offline(rcu_kind k) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  tls_of(k).ctr.store(0, std::memory_order_seq_cst);
  wake_writer(shared_of(k).waiting);
}

registration::~registration() {
  if (!st) return;
  if (st->kind != rcu_kind::memb) {
    qs_offline(st->kind);
  }
  {
    std::lock_guard guard(st->registry_lock);
    st->readers.erase(&entry);
  }
  // Our exit may be what a waiting grace period needs.
  wake_writer(st->kind == rcu_kind::memb ? memb.waiting : shared_of(st->kind).waiting);
}

rcu_kind kind_of(rcu_domain& d) noexcept {
  if (A::is(d, A::memb)) return rcu_kind::memb;
  return A::is(d, A::qsbr) ? rcu_kind::qsbr : rcu_kind::tasks;
}

}  // namespace

rcu_state& state_of(rcu_domain& d) noexcept {
  return *states()[static_cast<int>(kind_of(d))];
}

rcu_state* const* all_states(std::size_t& n) noexcept {
  n = 3;
  return states();
}

void memb_nesting_overflow() noexcept {
  std::fprintf(stderr,
               "quiesce: rcu_default_domain().lock() nested %llu levels deep: the reader word "
               "holds at most %llu; aborting (a deeper reader would look idle to a grace "
               "period)\n",
               static_cast<unsigned long long>(memb_nest_mask + 1),
               static_cast<unsigned long long>(memb_nest_mask));
  std::abort();
}

void memb_register_slow() noexcept {
  try {
    register_thread(*states()[0], memb_registration, tls_memb.word);
    tls_memb.registered = true;
  } catch (...) {
    // Out of memory for the thread name: register without it rather than read unprotected.
    tls_memb.registered = true;
  }
}

void memb_wake_writer() noexcept {
  wake_writer(memb.waiting);
}

void qs_report_slow(qs_shared& shared, qs_reader& reader) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // our reads are done
  reader.ctr.store(shared.gp_ctr.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (shared.waiting.load(std::memory_order_relaxed)) wake_writer(shared.waiting);
}

}  // namespace detail

using detail::rcu_access;
using detail::rcu_kind;

rcu_domain& rcu_default_domain() noexcept {
  return detail::default_domain_object;
}
rcu_domain& rcu_qsbr_domain() noexcept {
  return detail::qsbr_domain_object;
}
rcu_domain& rcu_tasks_domain() noexcept {
  return detail::tasks_domain_object;
}

const char* rcu_domain::name() const noexcept {
  switch (kind_) {
    case kind::memb:
      return "rcu";
    case kind::qsbr:
      return "rcu_qsbr";
    case kind::tasks:
      return "rcu_tasks";
  }
  return "?";
}

void rcu_thread_online(rcu_domain& domain) {
  const rcu_kind k = detail::kind_of(domain);
  if (k == rcu_kind::memb) {
    throw std::invalid_argument("domain: the default domain registers its readers itself");
  }
  detail::qs_reader& r = detail::tls_of(k);
  if (!r.registered) {
    detail::register_thread(
        detail::state_of(domain),
        k == rcu_kind::qsbr ? detail::qsbr_registration : detail::tasks_registration, r.ctr);
    r.registered = true;
  }
  detail::qs_online(k);
}

void rcu_thread_offline(rcu_domain& domain) {
  const rcu_kind k = detail::kind_of(domain);
  if (k == rcu_kind::memb) return;
  if (!detail::tls_of(k).registered) return;
  detail::qs_offline(k);
}

bool rcu_thread_is_online(rcu_domain& domain) noexcept {
  const rcu_kind k = detail::kind_of(domain);
  if (k == rcu_kind::memb) return detail::tls_memb.registered;
  return detail::tls_of(k).ctr.load(std::memory_order_relaxed) != 0;
}

void cond_resched() noexcept {
  // The kernel yields only when the scheduler asks; user space cannot see that flag
  // cheaply, so yield at most once per millisecond of calls (a yield with nobody else
  // runnable returns at once).
  thread_local std::uint64_t last_yield_ns = 0;
  const std::uint64_t now = now_ns();
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
