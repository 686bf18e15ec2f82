// SPDX-License-Identifier: Apache-2.0
// Seed 003's experiment (sanitize_boot.hpp): a sanitizer thread registered with RCU Tasks,
// a boot sequence whose BPF trampoline attach (register_ftrace_direct ->
// synchronize_rcu_tasks) waits for a Tasks grace period, the time line sampled meanwhile;
// and the comparison of the two policies with its renderings.
#include "quiesce/experiments/sanitize_boot.hpp"
#include "quiesce/experiments/keygcbench_format.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/summary.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"

namespace quiesce::experiments {

using sanitize::qs_policy;

namespace {

// A boot step: CPU work of `work` (as systemd's units do), never a sleep.
void boot_step(std::chrono::nanoseconds work) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(work.count());
  volatile std::uint64_t x = 0;
  while (now_ns() < end)
    x = x + 1;
}

bool is_report(std::string_view line) {
  return line.find("rcu_tasks_wait_gp:") != std::string_view::npos ||
         line.find("detected stalls on threads") != std::string_view::npos ||
         line.find("blocked for more than") != std::string_view::npos;
}

}  // namespace

boot_result run_boot(const boot_options& options) {
  sanitize::page_sanitizer sanitizer(options.sanitizer);  // allocates before anything is timed
  const watchdog_config saved = get_watchdog_config();
  watchdog_config cfg = saved;
  cfg.rcu_tasks_info = options.info;
  cfg.rcu_tasks_stall = options.stall;
  cfg.hung_task = options.hung;
  set_watchdog_config(cfg);
  log_capture capture(/*forward=*/false);

  boot_result r;
  r.policy = options.sanitizer.policy;
  std::atomic<bool> online{false};
  sanitize::sanitize_result sres;
  named_thread ksgxd("ksgxd", [&] {
    rcu_thread_online(rcu_tasks_domain());
    online.store(true, std::memory_order_release);
    sres = sanitizer.run();
    rcu_thread_offline(rcu_tasks_domain());
  });
  while (!online.load(std::memory_order_acquire))
    std::this_thread::yield();  // starts first

  const std::uint64_t boot_start = now_ns();
  named_thread systemd("systemd", [&] {
    for (int i = 0; i < options.steps_before; ++i)
      boot_step(options.step_work);
    const std::uint64_t attach = now_ns();
    r.attach_at_ms = static_cast<double>(attach - boot_start) / 1e6;
    rcu_synchronize(rcu_tasks_domain());  // bpf_trampoline_update -> synchronize_rcu_tasks
    r.waiter_ms = static_cast<double>(now_ns() - attach) / 1e6;
    for (int i = 0; i < options.steps_after; ++i)
      boot_step(options.step_work);
    r.boot_ms = static_cast<double>(now_ns() - boot_start) / 1e6;
  });
  // The time line: the sanitizer's progress, and when each report appears.
  std::atomic<bool> stop_sampling{false};
  std::vector<std::pair<double, double>> progress;
  std::vector<double> report_at;
  named_thread sampler("boot-sampler", [&] {
    std::size_t reports_seen = 0;
    const double pages = static_cast<double>(options.sanitizer.pages);
    for (;;) {
      const bool last = stop_sampling.load(std::memory_order_acquire);
      const double t = static_cast<double>(now_ns() - boot_start) / 1e6;
      progress.emplace_back(t, static_cast<double>(sanitizer.pages_done()) * 100 / pages);
      std::size_t reports = 0;
      for (const std::string& line : capture.lines())
        reports += is_report(line) ? 1 : 0;
      for (; reports_seen < reports; ++reports_seen)
        report_at.push_back(t);
      if (last) break;
      std::this_thread::sleep_for(options.sample_every);  // the plot's resolution
    }
  });
  systemd.join();
  ksgxd.join();
  stop_sampling.store(true, std::memory_order_release);
  sampler.join();
  r.progress = std::move(progress);
  r.report_at_ms = std::move(report_at);
  set_watchdog_config(saved);

  r.sanitize_ms = static_cast<double>(sres.duration_ns) / 1e6;
  r.pages = sres.pages_processed;
  r.pages_per_s = sres.duration_ns ? static_cast<double>(sres.pages_processed) * 1e9 /
                                         static_cast<double>(sres.duration_ns)
                                   : 0;
  bool in_report = false;  // a report's continuation lines start with a tab
  for (const std::string& line : capture.lines()) {
    if (is_report(line)) {
      r.reports.push_back(line);
      ++r.stall_reports;
      in_report = true;
    } else if (in_report && !line.empty() && line[0] == '\t') {
      r.reports.push_back(line);
    } else {
      in_report = false;
    }
  }
  return r;
}

nlohmann::json boot_result::to_json() const {
  return {{"qs", sanitize::to_string(policy)},
          {"waiter_ms", waiter_ms},
          {"boot_ms", boot_ms},
          {"sanitize_ms", sanitize_ms},
          {"pages", pages},
          {"pages_per_s", pages_per_s},
          {"stall_reports", stall_reports},
          {"attach_at_ms", attach_at_ms},
          {"progress", progress},
          {"report_at_ms", report_at_ms}};
}

std::string boot_result::text() const {
  std::string out = fmt::format(
      "qs policy {}: trampoline attach (Tasks rcu_synchronize) waited {:.3f} ms; boot {:.3f} ms; "
      "sanitizer {:.3f} ms, {} pages, {:.0f} pages/s; {} watchdog reports\n",
      sanitize::to_string(policy), waiter_ms, boot_ms, sanitize_ms, pages, pages_per_s,
      stall_reports);
  for (const auto& line : reports)
    out += "  " + line + "\n";
  return out;
}

namespace {

double waiter_drop_of(const boot_result& b, const boot_result& p) {
  return drop_pct(b.waiter_ms, p.waiter_ms);
}
double boot_drop_of(const boot_result& b, const boot_result& p) {
  return drop_pct(b.boot_ms, p.boot_ms);
}
double slowdown(const boot_result& b, const boot_result& p) {
  return -drop_pct(b.sanitize_ms, p.sanitize_ms);
}

run_spread over_pairs(const sanitize_comparison_result& r,
                      double (*figure)(const boot_result&, const boot_result&)) {
  run_spread s;
  for (std::size_t i = 0; i < r.baseline_runs.size() && i < r.patched_runs.size(); ++i)
    s.runs.push_back(figure(r.baseline_runs[i], r.patched_runs[i]));
  return s;
}

}  // namespace

double sanitize_comparison_result::waiter_drop_pct() const {
  return waiter_drop_of(baseline(), patched());
}
double sanitize_comparison_result::boot_drop_pct() const {
  return boot_drop_of(baseline(), patched());
}
double sanitize_comparison_result::sanitize_slowdown_pct() const {
  return slowdown(baseline(), patched());
}
run_spread sanitize_comparison_result::waiter_drop() const {
  return over_pairs(*this, waiter_drop_of);
}
run_spread sanitize_comparison_result::boot_drop() const {
  return over_pairs(*this, boot_drop_of);
}
run_spread sanitize_comparison_result::sanitize_slowdown() const {
  return over_pairs(*this, slowdown);
}

nlohmann::json sanitize_comparison_result::to_json() const {
  nlohmann::json j = {{"baseline", baseline().to_json()},
                      {"patched", patched().to_json()},
                      {"waiter_drop_pct", waiter_drop_pct()},
                      {"boot_drop_pct", boot_drop_pct()},
                      {"sanitize_slowdown_pct", sanitize_slowdown_pct()},
                      {"waiter_drop_pct_spread", waiter_drop().to_json()},
                      {"boot_drop_pct_spread", boot_drop().to_json()},
                      {"sanitize_slowdown_pct_spread", sanitize_slowdown().to_json()},
                      {"runs", nlohmann::json::array()}};
  for (std::size_t i = 0; i < baseline_runs.size() && i < patched_runs.size(); ++i) {
    j["runs"].push_back(
        {{"baseline", baseline_runs[i].to_json()}, {"patched", patched_runs[i].to_json()}});
  }
  return j;
}

std::string sanitize_comparison_result::text() const {
  std::string out;
  for (std::size_t i = 0; i < baseline_runs.size() && i < patched_runs.size(); ++i) {
    if (baseline_runs.size() > 1) out += fmt::format("pair {}:\n", i + 1);
    out += baseline_runs[i].text() + patched_runs[i].text();
  }
  const double slow = sanitize_slowdown_pct();
  out += fmt::format(
      "\nBefore fixed: boot time {:.3f} ms, trampoline attach waited {:.3f} ms\n"
      "After fixed:  boot time {:.3f} ms, trampoline attach waited {:.3f} ms\n"
      "-> waiter latency -{:.1f}%, boot time -{:.1f}%, sanitizer {:.2f}% {} "
      "(seed: boot 50 s -> 10.7 s)\n",
      baseline().boot_ms, baseline().waiter_ms, patched().boot_ms, patched().waiter_ms,
      waiter_drop_pct(), boot_drop_pct(), std::abs(slow), slow >= 0 ? "slower" : "faster");
  if (baseline_runs.size() > 1) {
    out += fmt::format(
        "Over the pairs: waiter latency drop {}; boot time drop {}; sanitizer time {}.\n",
        waiter_drop().text("{:.1f}%"), boot_drop().text("{:.1f}%"),
        sanitize_slowdown().text("{:+.2f}%"));
  }
  return out;
}

std::string sanitize_comparison_result::markdown() const {
  auto row = [](std::string name, const boot_result& r) {
    return fmt::format("| {} ({}) | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {} |\n", name,
                       sanitize::to_string(r.policy), r.waiter_ms, r.boot_ms, r.sanitize_ms,
                       r.pages_per_s, r.stall_reports);
  };
  std::string md =
      "| run | waiter ms | boot ms | sanitizer ms | pages/s | watchdog reports |\n"
      "|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < baseline_runs.size() && i < patched_runs.size(); ++i) {
    const std::string pair = baseline_runs.size() > 1 ? fmt::format(", pair {}", i + 1) : "";
    md += row("before" + pair, baseline_runs[i]) + row("after" + pair, patched_runs[i]);
  }
  run_spread sanitize_before, sanitize_after;
  for (const boot_result& b : baseline_runs)
    sanitize_before.runs.push_back(b.sanitize_ms);
  for (const boot_result& p : patched_runs)
    sanitize_after.runs.push_back(p.sanitize_ms);
  md += "\n" + ours_sentence(bought(), {watched("sanitizer time, ms", better::lower,
                                                sanitize_before, sanitize_after)});
  md += fmt::format(
      " Per pair: waiter latency drop {}, boot time drop {}, sanitizer time {} with a "
      "quiescent state per page (seed: boot 50 s -> 10.7 s, -79%). The plot shows the first "
      "pair.\n\n",
      waiter_drop().text("{:.1f}%"), boot_drop().text("{:.1f}%"),
      sanitize_slowdown().text("{:+.2f}%"));
  return md;
}

sanitize_comparison_result run_sanitize_comparison(
    const boot_options& options, int pairs, const std::function<void(const std::string&)>& step) {
  sanitize_comparison_result r;
  for (int pair = 0; pair < pairs; ++pair) {
    for (int k = 0; k < 2; ++k) {
      const bool bug = (k == 0) == (pair % 2 == 0);  // the order alternates
      boot_options o = options;
      o.sanitizer.policy = bug ? qs_policy::resched : qs_policy::tasks_qs;
      if (step) step(fmt::format("pair {}: {}", pair + 1, sanitize::to_string(o.sanitizer.policy)));
      (bug ? r.baseline_runs : r.patched_runs).push_back(run_boot(o));
    }
  }
  return r;
}

std::vector<plot_spec> sanitize_comparison_result::plots() const {
  return boot_plots({&baseline(), &patched()});
}

std::vector<plot_spec> boot_plots(const std::vector<const boot_result*>& boots) {
  plot_spec p{.name = "sanitize-boot",
              .title = "Seed 003: the trampoline attach's wait against the sanitizer's progress",
              .caption =
                  "The sanitizer's progress over the boot (lines) and the attach's "
                  "synchronize_rcu_tasks() wait (the bar at the top): with "
                  "cond_resched() the wait ends only when the loop does, with "
                  "cond_resched_tasks_qs() at once. Dashed lines: stall reports.",
              .xlabel = "time since the boot started, ms",
              .ylabel = "page operations done, % of the pages",
              .logx = false,
              .logy = false,
              .series = {},
              .marks = {}};
  double bar = 110;
  for (const boot_result* b : boots) {
    const char* name = sanitize::to_string(b->policy);
    p.series.push_back({fmt::format("sanitizer progress ({})", name), b->progress, "lines"});
    p.series.push_back({fmt::format("attach waiting ({})", name),
                        {{b->attach_at_ms, bar}, {b->attach_at_ms + b->waiter_ms, bar}},
                        "linespoints"});
    bar += 5;
    for (double t : b->report_at_ms)
      p.marks.push_back({t, fmt::format("stall report ({})", name)});
  }
  return {p};
}

std::vector<bought_row> sanitize_comparison_result::bought() const {
  run_spread waiter_before, waiter_after, boot_before, boot_after;
  for (const boot_result& b : baseline_runs) {
    waiter_before.runs.push_back(b.waiter_ms);
    boot_before.runs.push_back(b.boot_ms);
  }
  for (const boot_result& p : patched_runs) {
    waiter_after.runs.push_back(p.waiter_ms);
    boot_after.runs.push_back(p.boot_ms);
  }
  return {{.seed = "003",
           .metric = "the trampoline attach's wait for an RCU Tasks grace period, ms",
           .published = "the waiter no longer hangs",
           .seed_way = better::lower,
           .before = waiter_before,
           .after = waiter_after,
           .note = {}},
          {.seed = "003",
           .metric = "boot, ms",
           .published = "50 s -> 10.7 s (-79%)",
           .seed_way = better::lower,
           .before = boot_before,
           .after = boot_after,
           .note = "a scaled boot: a few steps around the attach"}};
}

}  // namespace quiesce::experiments
