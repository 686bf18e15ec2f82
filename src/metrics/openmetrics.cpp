// SPDX-License-Identifier: Apache-2.0
// write_openmetrics(): the runtime's stats rendered as one OpenMetrics scrape. The stats
// are gathered first (each module's own snapshot function, no lock held here), then
// rendered family by family, so that every family's samples are contiguous, as the format
// requires.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "quiesce/histogram.hpp"
#include "quiesce/metrics.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/watchdog.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce {

namespace {

// Label values: backslash, double quote and newline escaped (OpenMetrics ABNF).
std::string escaped(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using labels = std::vector<std::pair<std::string_view, std::string>>;

std::string label_text(const labels& ls, std::string_view extra = {}) {
  std::string out;
  for (const auto& [name, value] : ls) {
    out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", name, escaped(value));
  }
  if (!extra.empty()) out += fmt::format("{}{}", out.empty() ? "" : ",", extra);
  return out.empty() ? std::string() : "{" + out + "}";
}

// One metric family: its header, then one call of `sample` per subject.
class family_writer {
 public:
  explicit family_writer(std::string& out) : out_(out) {}

  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# TYPE {} {}\n# HELP {} {}\n", name, type, name, help);
  }
  void counter(std::string_view name, const labels& ls, double value) {
    out_ += fmt::format("{}_total{} {}\n", name, label_text(ls), number(value));
  }
  void gauge(std::string_view name, const labels& ls, double value) {
    out_ += fmt::format("{}{} {}\n", name, label_text(ls), number(value));
  }
  // A histogram of nanoseconds, rendered in seconds.
  void histogram_ns(std::string_view name, const labels& ls, const histogram& h) {
    std::uint64_t below = 0;
    std::size_t next = 0;
    for (const double le : bounds_s) {
      const auto le_ns = static_cast<std::uint64_t>(le * 1e9);
      // Whole buckets at or below le.
      while (next < histogram::bucket_count &&
             histogram::bucket_low(next) + histogram::bucket_width(next) - 1 <= le_ns) {
        below += h.bucket(next);
        ++next;
      }
      out_ += fmt::format("{}_bucket{} {}\n", name,
                          label_text(ls, fmt::format("le=\"{}\"", number(le))), below);
    }
    out_ += fmt::format("{}_bucket{} {}\n", name, label_text(ls, "le=\"+Inf\""), h.count());
    out_ += fmt::format("{}_count{} {}\n", name, label_text(ls), h.count());
    out_ += fmt::format("{}_sum{} {}\n", name, label_text(ls),
                        number(h.mean() * static_cast<double>(h.count()) / 1e9));
  }

 private:
  // 1 us .. 10 s in 1-2.5-5 steps: post -> start latencies, runs and grace periods alike.
  static constexpr std::array<double, 22> bounds_s = {
      1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
      5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};

  static std::string number(double v) { return fmt::format("{}", v); }

  std::string& out_;
};

// A family over a list of subjects: its header, then `sample(labels, subject)` per subject.
template <typename T, typename Sample>
void family(family_writer& w, std::string_view type, std::string_view name, std::string_view help,
            const std::vector<std::pair<labels, T>>& subjects, Sample sample) {
  w.header(name, type, help);
  for (const auto& [ls, s] : subjects)
    sample(ls, s);
}
template <typename T, typename F>
void counters(family_writer& w, std::string_view name, std::string_view help,
              const std::vector<std::pair<labels, T>>& subjects, F value) {
  family(w, "counter", name, help, subjects,
         [&](const labels& ls, const T& s) { w.counter(name, ls, static_cast<double>(value(s))); });
}
template <typename T, typename F>
void gauges(family_writer& w, std::string_view name, std::string_view help,
            const std::vector<std::pair<labels, T>>& subjects, F value) {
  family(w, "gauge", name, help, subjects,
         [&](const labels& ls, const T& s) { w.gauge(name, ls, static_cast<double>(value(s))); });
}
template <typename T, typename F>
void histograms(family_writer& w, std::string_view name, std::string_view help,
                const std::vector<std::pair<labels, T>>& subjects, F hist) {
  family(w, "histogram", name, help, subjects,
         [&](const labels& ls, const T& s) { w.histogram_ns(name, ls, hist(s)); });
}

std::uint64_t started(const wq_stats& s) {
  return s.queue_to_start_ns.count();
}

void write_workqueues(family_writer& w) {
  std::vector<std::pair<labels, wq_stats>> qs;
  for (wq_stats& s : all_workqueue_stats()) {
    labels ls{{"workqueue", s.name}, {"kind", s.unbound ? "unbound" : "bound"}};
    qs.emplace_back(std::move(ls), std::move(s));
  }
  const std::string_view p = "quiesce_workqueue_";
  const auto n = [&](std::string_view suffix) { return fmt::format("{}{}", p, suffix); };
  counters(w, n("queued"), "Instances queued (wq_monitor.py: total counts them as they start)", qs,
           [](const wq_stats& s) { return s.queued; });
  counters(w, n("started"), "Executions started", qs, started);
  counters(w, n("executed"), "Executions finished", qs,
           [](const wq_stats& s) { return s.executed; });
  gauges(w, n("in_flight"), "Executions running now (wq_monitor.py: infl)", qs,
         [](const wq_stats& s) { return started(s) > s.executed ? started(s) - s.executed : 0; });
  counters(w, n("cpu_seconds"),
           "CPU time of the workers of the pools this queue uses (wq_monitor.py: CPUtime; "
           "shared by queues on the same pools)",
           qs, [](const wq_stats& s) { return static_cast<double>(s.workers.run_ns) / 1e9; });
  counters(w, n("run_delay_seconds"),
           "Time those workers spent runnable, waiting for a CPU (schedstat)", qs,
           [](const wq_stats& s) { return static_cast<double>(s.workers.run_delay_ns) / 1e9; });
  counters(w, n("cpu_hog"), "Executions marked CPU-intensive (wq_monitor.py: CPUhog)", qs,
           [](const wq_stats& s) { return s.hog_reports; });
  counters(w, n("exceptions"), "Executions that threw", qs,
           [](const wq_stats& s) { return s.exceptions; });
  counters(w, n("cancelled"), "Pending instances removed by cancel", qs,
           [](const wq_stats& s) { return s.cancelled; });
  counters(w, n("rejected"), "Queueing refused (draining, or the process exiting)", qs,
           [](const wq_stats& s) { return s.rejected; });
  counters(w, n("dropped"), "Queued instances dropped at process exit", qs,
           [](const wq_stats& s) { return s.dropped; });
  counters(w, n("flushes"), "flush() calls that waited", qs,
           [](const wq_stats& s) { return s.flushes; });
  counters(w, n("backlog_yields"),
           "Times a queuer gave its CPU up to a queue whose every active slot was taken", qs,
           [](const wq_stats& s) { return s.backlog_yields; });
  gauges(w, n("max_active"), "The max_active limit (per CPU for bound queues)", qs,
         [](const wq_stats& s) { return s.max_active; });
  gauges(w, n("peak_active"), "The most items ever active at once in one domain", qs,
         [](const wq_stats& s) { return s.peak_active; });
  gauges(w, n("draining"), "1 while a drain is in progress", qs,
         [](const wq_stats& s) { return s.draining ? 1 : 0; });
  histograms(w, n("queue_to_start_seconds"), "Queued to execution started", qs,
             [](const wq_stats& s) -> const histogram& { return s.queue_to_start_ns; });
  histograms(w, n("run_seconds"), "Execution time (wall clock)", qs,
             [](const wq_stats& s) -> const histogram& { return s.run_ns; });
}

void write_pools(family_writer& w) {
  std::vector<std::pair<labels, pool_info>> ps;
  for (pool_info& p : worker_pools()) {
    labels ls{{"pool", std::to_string(p.id)},
              {"cpus", p.cpus},
              {"kind", p.bound ? "bound" : "unbound"},
              {"nice", std::to_string(p.nice)}};
    ps.emplace_back(std::move(ls), std::move(p));
  }
  gauges(w, "quiesce_pool_workers", "Workers of the pool", ps,
         [](const pool_info& p) { return p.nr_workers; });
  gauges(w, "quiesce_pool_idle_workers", "Idle workers", ps,
         [](const pool_info& p) { return p.nr_idle; });
  gauges(w, "quiesce_pool_running_workers", "Workers counted as running (concurrency management)",
         ps, [](const pool_info& p) { return p.nr_running; });
  gauges(w, "quiesce_pool_pending", "Items on the pool's worklist", ps,
         [](const pool_info& p) { return p.nr_pending; });
}

void write_posted_memory(family_writer& w) {
  const std::vector<std::pair<labels, posted_memory>> one{{labels{}, get_posted_memory()}};
  gauges(w, "quiesce_posted_memory_bytes",
         "Memory taken for posted items' nodes and not given back (trim_posted_memory)", one,
         [](const posted_memory& m) { return m.slab_bytes; });
  gauges(w, "quiesce_posted_free_nodes", "Posted items' nodes on the shared free lists", one,
         [](const posted_memory& m) { return m.free_nodes; });
}

void write_watchdog(family_writer& w) {
  const watchdog_counters c = get_watchdog_counters();
  const std::vector<std::pair<labels, watchdog_counters>> one{{labels{}, c}};
  counters(w, "quiesce_watchdog_wq_lockups", "Workqueue lockup reports (BUG: workqueue lockup)",
           one, [](const watchdog_counters& x) { return x.wq_lockups; });
  counters(w, "quiesce_watchdog_wq_cpu_hogs", "Executions the watchdog marked CPU-intensive", one,
           [](const watchdog_counters& x) { return x.wq_cpu_hogs; });
  counters(w, "quiesce_watchdog_wq_hog_reports", "\"hogged CPU\" reports", one,
           [](const watchdog_counters& x) { return x.wq_hog_reports; });
  counters(w, "quiesce_watchdog_wq_sleepers", "Workers found asleep with work pending", one,
           [](const watchdog_counters& x) { return x.wq_sleepers; });
  counters(w, "quiesce_watchdog_rcu_stall_infos", "RCU grace-period age reports", one,
           [](const watchdog_counters& x) { return x.rcu_stall_infos; });
  counters(w, "quiesce_watchdog_rcu_stalls", "RCU \"detected stalls on threads\" reports", one,
           [](const watchdog_counters& x) { return x.rcu_stalls; });
  counters(w, "quiesce_watchdog_rcu_hung_waiters", "\"blocked for more than N seconds\" reports",
           one, [](const watchdog_counters& x) { return x.rcu_hung_waiters; });
}

void write_rcu(family_writer& w) {
  std::vector<std::pair<labels, rcu_stats>> ds;
  for (rcu_domain* d : {&rcu_default_domain(), &rcu_qsbr_domain(), &rcu_tasks_domain()}) {
    ds.emplace_back(labels{{"domain", d->name()}}, rcu_domain_stats(*d));
  }
  const auto n = [](std::string_view suffix) { return fmt::format("quiesce_rcu_{}", suffix); };
  counters(w, n("grace_periods"), "Grace periods completed", ds,
           [](const rcu_stats& s) { return s.gp_completed; });
  counters(w, n("synchronize_calls"), "rcu_synchronize calls", ds,
           [](const rcu_stats& s) { return s.synchronize_calls; });
  counters(w, n("synchronize_shared"),
           "rcu_synchronize calls satisfied by another caller's grace period", ds,
           [](const rcu_stats& s) { return s.synchronize_shared; });
  counters(w, n("callbacks_queued"), "Callbacks queued (retire, call)", ds,
           [](const rcu_stats& s) { return s.callbacks_queued; });
  counters(w, n("callbacks_invoked"), "Callbacks taken for invocation", ds,
           [](const rcu_stats& s) { return s.callbacks_invoked; });
  gauges(w, n("callbacks_pending"), "Callbacks queued and not yet invoked", ds,
         [](const rcu_stats& s) {
           return s.callbacks_queued > s.callbacks_invoked
                      ? s.callbacks_queued - s.callbacks_invoked
                      : 0;
         });
  counters(w, n("callback_exceptions"), "Callbacks that threw", ds,
           [](const rcu_stats& s) { return s.callback_exceptions; });
  counters(w, n("stalls"), "\"detected stalls on threads\" reports", ds,
           [](const rcu_stats& s) { return s.stalls; });
  counters(w, n("misuse_reports"), "Waits inside a read-side critical section", ds,
           [](const rcu_stats& s) { return s.misuse_reports; });
  gauges(w, n("registered_threads"), "Threads registered with the domain", ds,
         [](const rcu_stats& s) { return s.registered_threads; });
  gauges(w, n("waiting_threads"), "Threads blocked in rcu_synchronize or rcu_barrier", ds,
         [](const rcu_stats& s) { return s.waiting_threads; });
  histograms(w, n("grace_period_seconds"),
             "Grace periods, from the first scan that found a reader holding one to the end "
             "(0 for one that waited for no reader)",
             ds, [](const rcu_stats& s) -> const histogram& { return s.gp_duration_ns; });
}

}  // namespace

void write_openmetrics(std::ostream& out) {
  std::string text;
  family_writer w(text);
  write_workqueues(w);
  write_pools(w);
  write_posted_memory(w);
  write_watchdog(w);
  write_rcu(w);
  text += "# EOF\n";
  out << text;
}

}  // namespace quiesce
