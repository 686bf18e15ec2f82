// Internal structures of the workqueue runtime (src/wq). Not installed.
//
// Objects and locks (kernel names in brackets):
//   pool          [worker_pool]      per-CPU (x normal/highpri) or per unbound scope group;
//                                    process-lifetime; pool::lock
//   worker        [worker]           a thread of one pool
//   pwq           [pool_workqueue]   one workqueue's presence in one pool: flush colors,
//                                    in-flight counts, per-pool stats
//   active_domain [wq_node_nr_active] max_active accounting and the inactive list: one per
//                                    pwq for bound queues, one per NUMA node for unbound
//   timer         one thread arming delayed work for the whole process
// Lock order: active_domain::lock -> pool::lock -> timer lock. Never the reverse; code
// that holds a pool lock and needs a (separate) domain lock drops the pool lock first.
// A per-CPU queue's domain shares its pool's lock, so there is only one lock to take.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "quiesce/cpu_set.hpp"
#include "quiesce/histogram.hpp"
#include "quiesce/list.hpp"
#include "quiesce/schedstat.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::detail {

// work::flags_ bits.
inline constexpr std::uint32_t work_pending = 1u << 0;    // WORK_STRUCT_PENDING
inline constexpr std::uint32_t work_canceling = 1u << 1;  // WORK_OFFQ_CANCELING

// The kernel's POOL_* flags that apply here.
inline constexpr unsigned pool_disassociated = 0x4;  // not bound to one CPU

inline constexpr int wq_dfl_active = 1024;   // WQ_DFL_ACTIVE
inline constexpr int wq_max_active = 2048;   // WQ_MAX_ACTIVE
inline constexpr int wq_dfl_min_active = 8;  // WQ_DFL_MIN_ACTIVE
inline constexpr int max_workers_per_pool = 1024;

// Access to work's private state for the runtime (the friend of class work).
struct wq_access {
  static constexpr list_node work::*node = &work::node_;
  static std::atomic<std::uint32_t>& flags(work& w) { return w.flags_; }
  static std::atomic<std::uint64_t>& last_id(work& w) { return w.last_id_; }
  static std::atomic<std::uint64_t>& pending_id(work& w) { return w.pending_id_; }
  static std::atomic<std::uint64_t>& running_id(work& w) { return w.running_id_; }
  static std::atomic<pool*>& queued_pool(work& w) { return w.queued_pool_; }
  static std::atomic<active_domain*>& inactive_in(work& w) { return w.inactive_in_; }
  static std::atomic<pool*>& last_pool(work& w) { return w.last_pool_; }
  static pwq*& pwq_of(work& w) { return w.pwq_; }
  static void*& on_list(work& w) { return w.on_list_; }
  static worker*& current_worker(work& w) { return w.current_worker_; }
  static int& color(work& w) { return w.color_; }
  static bool& active(work& w) { return w.active_; }
  static std::uint64_t& queued_ns(work& w) { return w.queued_ns_; }
  static std::uint64_t& activated_ns(work& w) { return w.activated_ns_; }
  static std::uint64_t& timer_deadline(work& w) { return w.timer_deadline_ns_; }
  static std::uint64_t& timer_seq(work& w) { return w.timer_seq_; }
  static workqueue*& timer_wq(work& w) { return w.timer_wq_; }
  static int& timer_cpu(work& w) { return w.timer_cpu_; }
  static void run(work& w) { w.fn_(w); }
  static const char* trace_name(const work& w) { return w.trace_name_; }
  static wq_impl& impl(workqueue& wq) { return *wq.impl_; }
  static workqueue*& timer_wq_ref(work& w) { return w.timer_wq_; }
};

using work_list = intrusive_list<work, wq_access::node>;

// A per-CPU queue's domain serves one pwq in one pool, so it shares that pool's lock
// (one lock round trip per queueing and per execution); an unbound queue's domain spans
// the pools of a NUMA node and has its own lock.
struct active_domain {
  explicit active_domain(int max, std::mutex* pool_lock = nullptr)
      : max_active(max), lock(pool_lock ? *pool_lock : own_lock), shares_pool_lock(pool_lock) {}
  const int max_active;  // I
  std::mutex own_lock;
  std::mutex& lock;             // I: own_lock, or the lock of the one pool it serves
  const bool shares_pool_lock;  // I
  int nr_active = 0;            // L: items counted active (on a worklist or running)
  int peak_active = 0;          // L: the most nr_active has been
  work_list inactive;           // L: items waiting for nr_active < max_active, FIFO
};

struct pool;
struct wq_impl;

// One workqueue's presence in one pool.
struct pwq {
  pwq(wq_impl* wq_, pool* pool_, active_domain* domain_) : wq(wq_), pool(pool_), domain(domain_) {}
  wq_impl* const wq;            // I
  struct pool* const pool;      // I
  active_domain* const domain;  // I
  std::atomic<int> color{0};    // A: flush color given to new items; flipped by flushers
  std::atomic<std::int64_t> in_flight[2] = {};  // A: items queued and not finished, by color
  // L(pool->lock):
  histogram queue_to_start_ns;
  histogram run_ns;
  std::uint64_t executed = 0;
  std::uint64_t exceptions = 0;
  std::uint64_t hogs = 0;
};

struct worker {
  worker(struct pool* p, int id_, std::string name_) : pool(p), id(id_), name(std::move(name_)) {}
  struct pool* const pool;       // I
  const int id;                  // I
  const std::string name;        // I
  std::thread thread;            // L: started and joined under the pool's management
  std::condition_variable wake;  // waited on with pool->lock held

  // L(pool->lock):
  list_node idle_node;         // linked in pool->idle while sleeping idle
  bool idle = false;           // on the idle list, not yet woken
  bool busy = false;           // processing items (left idle, not yet back)
  bool counted = false;        // included in pool->nr_running
  int block_depth = 0;         // may_block scopes entered by the current item
  bool cpu_intensive = false;  // current item marked (by its queue's flag or the watchdog)
  bool found_asleep = false;   // the watchdog saw it sleeping while counted
  bool exited = false;         // left the loop; on pool->dying
  bool waking = false;         // counted in pool->nr_waking
  work* current = nullptr;     // the item executing
  struct pwq* current_pwq = nullptr;
  std::uint64_t current_start_ns = 0;
  std::uint64_t current_seq = 0;  // executions started by this worker
  work_list scheduled;            // items handed to this worker (non-reentrancy)
  std::uint64_t idle_since_ns = 0;
  pid_t tid = 0;
  clockid_t cpu_clock = 0;
  int stat_fd = -1;  // /proc/self/task/TID/stat, for the sleep check
  std::unique_ptr<schedstat_reader> sched;

  // W: the watchdog thread only (under pool->lock too, as it runs its check there).
  std::uint64_t wd_seen_seq = 0;
  std::uint64_t wd_cpu_baseline = 0;
};

using idle_list = intrusive_list<worker, &worker::idle_node>;

struct pool {
  pool(int id_, cpu_set cpus_, int cpu_, int node_, int nice_)
      : id(id_), cpus(std::move(cpus_)), cpu(cpu_), node(node_), nice(nice_) {}
  const int id;        // I
  const cpu_set cpus;  // I: where its workers run
  const int cpu;       // I: the CPU of a bound pool, -1 for unbound
  const int node;      // I
  const int nice;      // I
  bool bound() const noexcept { return cpu >= 0; }
  // How many workers may count as running at once: one on a per-CPU pool (the kernel's
  // concurrency management); on an unbound pool one per CPU of its scope group. The kernel
  // does not cap unbound pools, but there threads are cheap to switch; here extra runnable
  // workers only time-share the same CPUs (libdispatch caps its pools the same way). A
  // worker that blocks (may_block, or found asleep) stops counting, so blocking items
  // never starve the pool.
  int max_running() const noexcept { return bound() ? 1 : static_cast<int>(cpus.size()); }
  unsigned flags() const noexcept { return bound() ? 0 : pool_disassociated; }

  std::mutex lock;
  work_list worklist;                            // L: active items waiting for a worker
  std::vector<std::unique_ptr<worker>> workers;  // L: every live worker
  std::vector<std::unique_ptr<worker>> dying;    // L: exited workers, to be joined
  idle_list idle;                                // L: sleeping idle workers, most recent first
  int nr_workers = 0;                            // L
  int nr_idle = 0;                               // L
  int nr_running = 0;                            // L: busy workers that count (see above)
  int nr_waking = 0;                             // L: kicked or created, not yet looking
  int next_worker_id = 0;                        // L
  bool stopping = false;                         // L
  bool creation_failed_reported = false;         // L
  sched_sample exited_sched;                     // L: schedstat of culled workers
  std::atomic<std::uint64_t> watchdog_ts{0};     // A: last progress (item started / list filled)
  std::uint64_t lockup_reported_ts = 0;          // W: watchdog_ts when a lockup was reported

  // The kernel's policy predicates (all L).
  // Work is waiting and fewer workers than max_running() count as running: wake (or
  // create) a worker. Per-CPU pools: nobody is running (kernel: nr_running == 0).
  bool need_more_worker() const noexcept { return !worklist.empty() && nr_running < max_running(); }
  // A worker that finished an item takes the next one while running workers do not
  // exceed max_running() (per-CPU pools: while it alone runs, kernel: nr_running <= 1).
  bool keep_working() const noexcept { return !worklist.empty() && nr_running <= max_running(); }
  // Idle workers beyond two are culled once they are a quarter of the busy ones.
  bool too_many_workers() const noexcept {
    const int nr_busy = nr_workers - nr_idle;
    return nr_idle > 2 && (nr_idle - 2) * 4 >= nr_busy;
  }
};

// Pool-level operations (pool.cpp). All `_locked` functions need pool->lock held.
void kick_pool_locked(pool& p);       // wake or create a worker if need_more_worker()
void update_count_locked(worker& w);  // sync w.counted with its state, adjust nr_running
// Appends an active item to the worklist; `now` is its activation time.
void insert_work_locked(pool& p, work& item, std::uint64_t now);
worker* this_thread_worker() noexcept;  // the calling worker, or nullptr
pool& bound_pool(int cpu, bool highpri);
pool& unbound_pool(const cpu_set& cpus, int node, bool highpri);
std::vector<pool*> all_pools();
std::uint64_t idle_timeout_ns() noexcept;

// The state of one workqueue (workqueue.cpp).
struct wq_impl {
  wq_impl(std::string name_, const wq_options& opt_);
  const std::string name;  // I
  const wq_options opt;    // I (normalised: ordered implies unbound, max_active 1)
  const int max_active;    // I: the effective limit
  const char* trace_name;  // I
  bool system = false;     // I: a system queue, never destroyed
  std::vector<std::unique_ptr<active_domain>> domains;  // I
  std::vector<std::unique_ptr<pwq>> pwqs;               // I
  std::vector<int> pwq_index_of_cpu;                    // I: cpu number -> pwqs index, -1
  std::mutex flush_mutex;                               // serialises flush() callers
  std::atomic<int> draining{0};                         // A: drain() calls in progress
  std::atomic<std::int64_t> timers_armed{0};            // A: delayed items armed for this queue
  std::atomic<std::uint64_t> queued{0};                 // A
  std::atomic<std::uint64_t> cancelled{0};              // A
  std::atomic<std::uint64_t> rejected{0};               // A
  std::atomic<std::uint64_t> flushes{0};                // A: flushes that flipped their colors
  std::atomic<bool> reject_reported{false};             // A

  pwq& pwq_for_cpu(int cpu);
  pwq* pwq_in_pool(const pool* p) noexcept;
  bool in_flight() const noexcept;  // any item queued or running (timers not included)
};

// Queues an item whose pending bit the caller owns (and whose pending_id is set) on the
// pool for `cpu` (-1: the calling thread's CPU). from_timer: a delayed item firing, which
// a draining queue accepts. Returns false (and releases the pending bit) if rejected.
bool queue_work_owned(wq_impl& wq, int cpu, work& item, bool from_timer);

// Instance accounting (workqueue.cpp): an instance of q's ended (ran or was cancelled).
// The _locked form is for domains that share the pool lock, called with it held.
void pwq_dec_nr_in_flight(pwq& q, int color, bool active);
void pwq_dec_nr_in_flight_locked(pwq& q, int color, bool active);

// The watchdog's checks of every pool: lockup, CPU hogs, sleeping workers (wq_watchdog.cpp).
void wq_watchdog_check(const std::vector<pool*>& pools, std::uint64_t now_ns,
                       const watchdog_config& config);

// Timer (timer.cpp).
void timer_arm(work& item, workqueue& wq, int cpu, std::uint64_t deadline_ns);
// Disarms `item` if its timer is armed: true, with the queue and CPU it was armed for.
bool timer_cancel(work& item, workqueue** wq, int* cpu);

// Takes the pending bit of `item` (kernel: try_to_grab_pending). If the item was pending,
// it is removed from its timer, worklist or inactive list, its instance accounting is
// undone and (if `count_cancel`) it is counted as cancelled on its queue; returns whether
// it was pending. Either way the caller owns the pending bit afterwards. (work.cpp)
bool grab_pending(work& item, bool count_cancel);

}  // namespace quiesce::detail
