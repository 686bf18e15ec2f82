// SPDX-License-Identifier: Apache-2.0
// Seed 000's comparison and its renderings (keygc_compare.hpp).
#include "quiesce/experiments/keygc_compare.hpp"

#include <fmt/format.h>

#include <cmath>

#include "quiesce/host/cyclictest.hpp"

namespace quiesce::experiments {

namespace {

std::string probe_line(const keygc_result& r) {
  return fmt::format(
      "probe (queue->start on the collector's CPU): n={} p50={:.1f}us "
      "p99={:.1f}us max={:.1f}us",
      r.probe_ns.count(), r.probe_ns.percentile(50) / 1e3, r.probe_ns.percentile(99) / 1e3,
      r.probe_ns.max() / 1e3);
}

std::string describe(const keygc_result& r) {
  std::string mode = keys::to_string(r.config.mode);
  if (r.config.mode == keys::gc_mode::chunked) mode += fmt::format(" (chunk {})", r.config.chunk);
  if (r.config.mode == keys::gc_mode::budget) mode += fmt::format(" ({} us)", r.config.slice_us);
  return mode;
}

// The column title of a collector: "monolithic", "chunked (64)", "budget (100 us)".
std::string title(const keygc_result& r) {
  const std::string m = keys::to_string(r.config.mode);
  if (r.config.mode == keys::gc_mode::chunked) return fmt::format("{} ({})", m, r.config.chunk);
  if (r.config.mode == keys::gc_mode::budget)
    return fmt::format("{} ({} us)", m, r.config.slice_us);
  return m;
}

// quiesce's collectors of a comparison, in column order.
std::vector<const keygc_result*> collectors(const keygc_comparison_result& r) {
  std::vector<const keygc_result*> ours{&r.baseline, &r.patched};
  if (r.also) ours.push_back(&*r.also);
  return ours;
}

// One table row: its name, the kernel's cell, then one cell per quiesce collector.
std::string table_row(const std::string& name, const std::string& kernel,
                      const std::vector<std::string>& ours) {
  std::string row = fmt::format("| {} | {} |", name, kernel);
  for (const std::string& cell : ours)
    row += fmt::format(" {} |", cell);
  return row + "\n";
}

// The kernel's collector and quiesce's side by side, measured with the same ruler.
std::string columns(const kernel_keygc_result& k, const std::vector<const keygc_result*>& ours) {
  auto each = [&](auto cell) {
    std::vector<std::string> cells;
    for (const keygc_result* r : ours)
      cells.push_back(cell(*r));
    return cells;
  };
  std::string md = table_row("", "kernel " + k.kernel,
                             each([](const keygc_result& r) { return "quiesce " + title(r); }));
  md += table_row("---", "---", each([](const keygc_result&) { return std::string("---"); }));
  // keygcbench's own metric first: each execution of the collector (the kernel's from its
  // workqueue tracepoints).
  auto bench = [](const summary& s) {
    return s.count() == 0 ? std::string("-")
                          : fmt::format("{:.3f} / {:.3f} / {:.3f} / {:.3f}", s.min() / 1e6,
                                        s.mean() / 1e6, s.max() / 1e6, s.variance() / 1e12);
  };
  const auto traced = [&](const std::string& cell) {
    return k.traced() ? cell : std::string("untraced");
  };
  md += table_row("keygcbench unused: min / avg / max ms / var ms^2",
                  traced(k.unused.skipped.empty() ? bench(k.unused.exec_ns) : "skipped"),
                  each([&](const keygc_result& r) { return bench(r.unused); }));
  md += table_row("keygcbench expired: min / avg / max ms / var ms^2",
                  traced(k.expired.skipped.empty() ? bench(k.expired.exec_ns) : "skipped"),
                  each([&](const keygc_result& r) { return bench(r.expired); }));
  // A kernel phase that was skipped leaves its sums over one phase only: say so in the cell,
  // beside quiesce's two.
  const std::string one_phase =
      !k.unused.skipped.empty() && k.expired.skipped.empty()   ? " (expired phase only)"
      : k.unused.skipped.empty() && !k.expired.skipped.empty() ? " (unused phase only)"
                                                               : "";
  md += table_row("keygcbench combined", traced(bench(k.combined()) + one_phase),
                  each([&](const keygc_result& r) { return bench(r.combined()); }));
  md += table_row("total task time, ms",
                  traced(fmt::format("{:.1f}", k.combined().sum() / 1e6) + one_phase),
                  each([](const keygc_result& r) { return fmt::format("{:.1f}", r.total_ms()); }));
  struct row {
    const char* what;
    double (*value)(const phase_latency&);
    const char* format;
  };
  static const row rows[] = {
      {"probe max on the collector's CPU, ms",
       [](const phase_latency& l) { return l.probe.on.late_ns.max() / 1e6; }, "{:.3f}"},
      {"probe avg on the collector's CPU, ms",
       [](const phase_latency& l) { return l.probe.on.late_ns.mean() / 1e6; }, "{:.3f}"},
      {"probe max on the other CPUs, ms",
       [](const phase_latency& l) { return l.probe.others.late_ns.max() / 1e6; }, "{:.3f}"},
      {"reclaim time, ms (mean of runs)",
       [](const phase_latency& l) { return l.reclaim_ns.mean() / 1e6; }, "{:.1f}"},
  };
  auto cell = [](const phase_latency& l, const row& r) {
    return fmt::format(fmt::runtime(r.format), r.value(l));
  };
  const struct {
    const char* name;
    const kernel_phase& kernel;
    phase_latency keygc_result::*ours;
  } phases[] = {{"unused", k.unused, &keygc_result::unused_latency},
                {"expired", k.expired, &keygc_result::expired_latency}};
  for (const auto& p : phases) {
    for (const row& r : rows) {
      md += table_row(fmt::format("{}: {}", p.name, r.what),
                      p.kernel.skipped.empty() ? cell(p.kernel.latency, r) : "skipped",
                      each([&](const keygc_result& q) { return cell(q.*p.ours, r); }));
    }
  }
  for (const auto& p : phases) {
    if (p.kernel.cyclictest_cpu < 0) continue;
    md += table_row(fmt::format("{}: cyclictest (rt-tests) max on CPU {}, ms (the ruler beside "
                                "the probe)",
                                p.name, p.kernel.cyclictest_cpu),
                    fmt::format("{:.3f}", p.kernel.cyclictest_max_ns.max() / 1e6),
                    each([](const keygc_result&) { return std::string("-"); }));
  }
  md += table_row(
      "work-item probe max (queue->start on the collector's pool), ms", "-",
      each([](const keygc_result& r) { return fmt::format("{:.3f}", r.probe_ns.max() / 1e6); }));
  if (!k.expired.skipped.empty()) {
    md += fmt::format("\nThe kernel's expired phase was skipped: {}.\n", k.expired.skipped);
  }
  md += k.traced() ? fmt::format(
                         "\nThe kernel's executions come from its workqueue tracepoints "
                         "(workqueue_execute_start/end of key_garbage_collector){}.\n",
                         k.lost_events ? fmt::format("; {} events were lost", k.lost_events) : "")
                   : fmt::format("\nThe kernel's executions were not traced: {}.\n", k.untraced);
  return md;
}

std::string summary_row(const char* name, const summary& s) {
  return fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", name, s.count(),
                     s.min() / 1e6, s.mean() / 1e6, s.max() / 1e6, s.variance() / 1e12);
}

}  // namespace

std::string keygc_text(const keygc_result& r) {
  return fmt::format(
      "keygcbench results, {} ({} keys, {} run{}, {} executions):\n\n{}\n"
      "total task time: {:.3f} ms\n{}\nhog reports: {}\n\n{}",
      describe(r), r.config.keys, r.config.runs, r.config.runs == 1 ? "" : "s", r.executions,
      keygc_lines(r), r.total_ms(), probe_line(r), r.hog_reports,
      phase_latency_lines(r.unused_latency, r.expired_latency, r.probe_policy));
}

namespace {
run_spread spread_of(const std::vector<keygc_comparison>& runs, double keygc_comparison::*figure) {
  run_spread s;
  for (const keygc_comparison& c : runs)
    s.runs.push_back(c.*figure);
  return s;
}
}  // namespace

run_spread keygc_comparison_result::variance_drop() const {
  return spread_of(per_run, &keygc_comparison::variance_drop_pct);
}
run_spread keygc_comparison_result::total_time_increase() const {
  return spread_of(per_run, &keygc_comparison::total_time_increase_pct);
}
run_spread keygc_comparison_result::probe_max_drop() const {
  return spread_of(per_run, &keygc_comparison::probe_max_drop_pct);
}

nlohmann::json keygc_comparison_result::to_json() const {
  const keygc_comparison c = figures();
  nlohmann::json j = {{"baseline", baseline.to_json()},
                      {"patched", patched.to_json()},
                      {"variance_drop_pct", c.variance_drop_pct},
                      {"total_time_increase_pct", c.total_time_increase_pct},
                      {"probe_max_drop_pct", c.probe_max_drop_pct},
                      {"variance_drop_pct_spread", variance_drop().to_json()},
                      {"total_time_increase_pct_spread", total_time_increase().to_json()},
                      {"probe_max_drop_pct_spread", probe_max_drop().to_json()},
                      {"per_run", nlohmann::json::array()}};
  for (const keygc_comparison& r : per_run) {
    j["per_run"].push_back({{"variance_drop_pct", r.variance_drop_pct},
                            {"total_time_increase_pct", r.total_time_increase_pct},
                            {"probe_max_drop_pct", r.probe_max_drop_pct}});
  }
  if (also) j["also"] = also->to_json();
  if (kernel) j["kernel"] = kernel->to_json();
  if (!kernel_unusable.empty()) j["kernel_unusable"] = kernel_unusable;
  return j;
}

keygc_comparison_result run_keygc_comparison(const keygc_config& baseline,
                                             const keygc_config& patched, int pairs,
                                             const std::function<void(const std::string&)>& step,
                                             const std::optional<keygc_config>& also) {
  keygc_comparison_result r;
  auto run_one = [&](int run, const keygc_config& c) {
    if (step) step(fmt::format("run {}: {}", run + 1, keys::to_string(c.mode)));
    keygc_config one = c;
    one.runs = 1;
    return run_keygc(one);
  };
  auto pool = [](std::optional<keygc_result>& side, keygc_result&& one) {
    if (side) {
      side->merge(one);
    } else {
      side = std::move(one);
    }
  };
  std::optional<keygc_result> base_all, patched_all;
  for (int run = 0; run < pairs; ++run) {
    const bool base_first = run % 2 == 0;  // the order alternates
    keygc_result first = run_one(run, base_first ? baseline : patched);
    if (also) pool(r.also, run_one(run, *also));
    keygc_result second = run_one(run, base_first ? patched : baseline);
    keygc_result& b = base_first ? first : second;
    keygc_result& p = base_first ? second : first;
    r.per_run.push_back(compare(b, p));
    r.baseline_variance_ms2.runs.push_back(b.combined().variance() / 1e12);
    r.patched_variance_ms2.runs.push_back(p.combined().variance() / 1e12);
    r.baseline_total_ms.runs.push_back(b.total_ms());
    r.patched_total_ms.runs.push_back(p.total_ms());
    pool(base_all, std::move(b));
    pool(patched_all, std::move(p));
  }
  if (base_all) r.baseline = std::move(*base_all);
  if (patched_all) r.patched = std::move(*patched_all);
  return r;
}

std::vector<bought_row> keygc_comparison_result::bought() const {
  return {{.seed = "000",
           .metric = "variance of the collector's execution times, ms^2",
           .published = "-93% (chunks of 64)",
           .seed_way = better::lower,
           .before = baseline_variance_ms2,
           .after = patched_variance_ms2,
           .note = {}},
          {.seed = "000",
           .metric = "total task time, ms",
           .published = "+2.2% (the price of chunking)",
           .seed_way = better::higher,
           .before = baseline_total_ms,
           .after = patched_total_ms,
           .note = {},
           .good_way = better::lower}};
}

std::string keygc_comparison_result::text() const {
  const keygc_comparison c = figures();
  std::string text = fmt::format(
      "{}\n{}\nThese results translate to:\n\n- {:.1f}% drop in the combined "
      "variance.\n- {:.1f}% {} in the total task time.\n- {:.1f}% drop in the "
      "probe's max latency.\n{}",
      keygc_text(baseline), keygc_text(patched) + (also ? "\n" + keygc_text(*also) : ""),
      c.variance_drop_pct, std::abs(c.total_time_increase_pct),
      c.total_time_increase_pct >= 0 ? "increase" : "decrease", c.probe_max_drop_pct,
      per_run.size() > 1
          ? fmt::format("\nPer pair of runs: variance drop {}; total task time {}; probe max "
                        "drop {}.\n",
                        variance_drop().text("{:.1f}%"), total_time_increase().text("{:+.1f}%"),
                        probe_max_drop().text("{:.1f}%"))
          : std::string());
  if (kernel) {
    text = kernel_keygc_text(*kernel) + "\n" + text + "\n" + columns(*kernel, collectors(*this));
  }
  return text;
}

std::string keygc_comparison_result::markdown() const {
  std::string md;
  const char* sides[] = {"baseline", "patched", "also"};
  const std::vector<const keygc_result*> ours = collectors(*this);
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const keygc_result& r = *ours[i];
    md += fmt::format(
        "**{}** ({}, {} keys): total task time {:.1f} ms; probe p50 {:.1f} us, "
        "p99 {:.1f} us, max {:.1f} us; hog reports {}\n\n",
        sides[i], title(r), r.config.keys, r.total_ms(), r.probe_ns.percentile(50) / 1e3,
        r.probe_ns.percentile(99) / 1e3, r.probe_ns.max() / 1e3, r.hog_reports);
    md += "| phase | n | min ms | avg ms | max ms | var ms^2 |\n|---|---|---|---|---|---|\n";
    md += summary_row("unused", r.unused) + summary_row("expired", r.expired) +
          summary_row("combined", r.combined());
    md += "\n";
  }
  md += ours_sentence(bought(), {watched("work-item probe max, us (every run pooled)",
                                         better::lower, pooled(baseline.probe_ns.max() / 1e3),
                                         pooled(patched.probe_ns.max() / 1e3))});
  md += fmt::format(
      " Per pair of runs: variance drop {}; total task time {}; probe max drop {} (seed: 93% "
      "drop, 2.2% increase). The tables above pool every run.\n\n",
      variance_drop().text("{:.1f}%"), total_time_increase().text("{:+.1f}%"),
      probe_max_drop().text("{:.1f}%"));
  md += "#### The host kernel's collector, same population\n\n";
  if (kernel) {
    md += columns(*kernel, collectors(*this));
    md +=
        "\nThe cyclictest-style probe (a SCHED_FIFO thread per CPU waking on absolute 1 ms "
        "deadlines) shows what holds a CPU against the scheduler: the kernel's collector, on "
        "this non-preemptible kernel, does. quiesce's collectors are user-space threads that "
        "a waking FIFO thread preempts at once; what the monolithic one holds is its worker "
        "pool, which the work-item probe shows.\n\n";
  } else {
    md += fmt::format("Not measured: {}.\n\n",
                      kernel_unusable.empty() ? std::string("not asked") : kernel_unusable);
  }
  return md;
}

std::vector<plot_spec> keygc_comparison_result::plots() const {
  return keygc_plots(collectors(*this));
}

std::vector<plot_spec> keygc_plots(const std::vector<const keygc_result*>& results) {
  plot_spec dist{.name = "keygc-executions",
                 .title = "Seed 000: duration of each collector execution (CDF)",
                 .caption = fmt::format(
                     "Each point is one execution of the collector (both phases, all runs): "
                     "a monolithic collector's few long executions against a chunked one's "
                     "many short ones - the variance the patch removes (log x)."),
                 .xlabel = "execution time, ms (log)",
                 .ylabel = "fraction of executions <= x",
                 .logx = true,
                 .series = {},
                 .marks = {}};
  plot_spec probe{.name = "keygc-probe",
                  .title = "Seed 000: the work-item probe's wait on the collector's CPU",
                  .caption =
                      "A work item queued every 1 ms on the collector's CPU pool: how long it "
                      "waited to start over the run (log y), one panel per collector on the "
                      "same axes. Spikes are the pool held by an execution; the chunked "
                      "collector lets the probe in between chunks.",
                  .xlabel = "time into the measured runs (one after another), ms",
                  .ylabel = "queue -> start, us (log)",
                  .logx = false,
                  .logy = true,
                  .series = {},
                  .marks = {},
                  .height = 300,
                  .panel_per_series = true};
  for (const keygc_result* r : results) {
    std::vector<double> all = r->unused_exec_ns;
    all.insert(all.end(), r->expired_exec_ns.begin(), r->expired_exec_ns.end());
    dist.series.push_back({title(*r), cdf_points(std::move(all), 1e-6), "linespoints"});
    probe.series.push_back({title(*r), r->probe_series, "points"});
  }
  return {dist, probe};
}

void add_kernel_column(keygc_comparison_result& r, const keygc_config& c,
                       std::optional<unsigned> set_gc_delay) {
  if (auto why = kernel_keyring_unusable(c.keys, c.per_keyring)) {
    r.kernel_unusable = *why;
    return;
  }
  kernel_keygc_config k;
  k.keys = c.keys;
  k.per_keyring = c.per_keyring;
  k.cyclictest = !host::cyclictest_unavailable();  // the ruler, where rt-tests is installed
  k.set_gc_delay = set_gc_delay;
  try {
    r.kernel = run_kernel_keygc(k);
  } catch (const std::exception& e) {
    r.kernel_unusable = e.what();
  }
}

}  // namespace quiesce::experiments
