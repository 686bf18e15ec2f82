// quiesce keygc - keygcbench for quiesce (seed 000): the key collector's execution times
// and the latency it inflicts on its CPU's pool, monolithic vs chunked vs budget.
#include <fmt/format.h>

#include <optional>

#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "number_option.hpp"
#include "progress.hpp"
#include "registry.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

struct keygc_cli {
  keygc_config config;
  std::string mode = "chunked";
  std::string against = "monolithic";
  bool compare = false;
  bool kernel = false;       // the host kernel's collector only
  bool with_kernel = false;  // --compare plus the kernel as a third column
  std::optional<unsigned> set_gc_delay;
  bool json = false;
};

kernel_keygc_config kernel_config_for(const keygc_cli& o) {
  kernel_keygc_config k;
  k.keys = o.config.keys;
  k.per_keyring = o.config.per_keyring;
  k.runs = o.config.runs;
  k.cpu = o.config.cpu;
  k.set_gc_delay = o.set_gc_delay;
  k.probe_priority = o.config.probe_priority;
  return k;
}

keygc_config config_for(const keygc_cli& o, const std::string& mode) {
  keygc_config c = o.config;
  c.mode = keys::parse_gc_mode(mode);
  return c;
}

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

std::string result_text(const keygc_result& r) {
  return fmt::format(
      "keygcbench results, {} ({} keys, {} run{}, {} executions):\n\n{}\n"
      "total task time: {:.3f} ms\n{}\nhog reports: {}\n\n{}",
      describe(r), r.config.keys, r.config.runs, r.config.runs == 1 ? "" : "s", r.executions,
      keygc_lines(r), r.total_ms(), probe_line(r), r.hog_reports,
      phase_latency_lines(r.unused_latency, r.expired_latency, r.probe_policy));
}

// The three collectors side by side, measured with the same ruler, from their JSON (the
// kernel's from kernel_keygc_result, quiesce's from keygc_result): for the CLI and the report.
std::string three_columns(const nlohmann::json& k, const nlohmann::json& base,
                          const nlohmann::json& patched) {
  auto title = [](const nlohmann::json& r) {
    std::string m = r["mode"].get<std::string>();
    return m == "chunked" ? fmt::format("chunked ({})", r["chunk"].get<int>()) : m;
  };
  std::string md = fmt::format("| | kernel {} | quiesce {} | quiesce {} |\n|---|---|---|---|\n",
                               k["kernel"].get<std::string>(), title(base), title(patched));
  struct row {
    const char* what;
    std::vector<const char*> path;  // inside a phase's JSON
    const char* format;
  };
  static const row rows[] = {
      {"probe max on the collector's CPU, ms", {"probe", "on_collector_cpu", "max_ms"}, "{:.3f}"},
      {"probe avg on the collector's CPU, ms", {"probe", "on_collector_cpu", "avg_ms"}, "{:.3f}"},
      {"probe max on the other CPUs, ms", {"probe", "other_cpus", "max_ms"}, "{:.3f}"},
      {"reclaim time, ms (mean of runs)", {"reclaim", "avg_ms"}, "{:.1f}"},
  };
  auto cell = [](const nlohmann::json& phase, const row& r) {
    if (phase.contains("skipped")) return std::string("skipped");
    const nlohmann::json* j = &phase;
    for (const char* key : r.path) {
      if (!j->contains(key)) return std::string("-");
      j = &(*j)[key];
    }
    return fmt::format(fmt::runtime(r.format), j->get<double>());
  };
  for (const char* phase : {"unused", "expired"}) {
    const std::string latency = std::string(phase) + "_latency";
    for (const row& r : rows) {
      md += fmt::format("| {}: {} | {} | {} | {} |\n", phase, r.what, cell(k[phase], r),
                        cell(base[latency], r), cell(patched[latency], r));
    }
  }
  md += fmt::format(
      "| work-item probe max (queue->start on the collector's pool), ms | - | {:.3f} | {:.3f} |\n",
      base["probe"]["max_us"].get<double>() / 1e3, patched["probe"]["max_us"].get<double>() / 1e3);
  if (k["expired"].contains("skipped")) {
    md += fmt::format("\nThe kernel's expired phase was skipped: {}.\n",
                      k["expired"]["skipped"].get<std::string>());
  }
  return md;
}

std::string comparison_text(const keygc_result& base, const keygc_result& patched) {
  const keygc_comparison c = compare(base, patched);
  return fmt::format(
      "{}\n{}\nThese results translate to:\n\n- {:.1f}% drop in the combined "
      "variance.\n- {:.1f}% {} in the total task time.\n- {:.1f}% drop in the "
      "probe's max latency.\n",
      result_text(base), result_text(patched), c.variance_drop_pct,
      std::abs(c.total_time_increase_pct), c.total_time_increase_pct >= 0 ? "increase" : "decrease",
      c.probe_max_drop_pct);
}

nlohmann::json comparison_json(const keygc_result& base, const keygc_result& patched) {
  const keygc_comparison c = compare(base, patched);
  return {{"baseline", base.to_json()},
          {"patched", patched.to_json()},
          {"variance_drop_pct", c.variance_drop_pct},
          {"total_time_increase_pct", c.total_time_increase_pct},
          {"probe_max_drop_pct", c.probe_max_drop_pct}};
}

void run_command(const keygc_cli& o) {
  if (o.kernel) {
    const kernel_keygc_result k = run_kernel_keygc(kernel_config_for(o));
    fmt::print("{}", o.json ? k.to_json().dump(2) + "\n" : kernel_keygc_text(k));
    return;
  }
  if (o.compare) {
    progress_line progress("quiesce keygc --compare", o.with_kernel ? 3 : 2,
                           progress_wanted(o.json));
    std::optional<kernel_keygc_result> k;
    if (o.with_kernel) {
      progress.step("the host kernel's collector");
      k = run_kernel_keygc(kernel_config_for(o));
    }
    progress.step(o.against);
    const keygc_result base = run_keygc(config_for(o, o.against));
    progress.step(o.mode);
    const keygc_result patched = run_keygc(config_for(o, o.mode));
    if (o.json) {
      nlohmann::json j = comparison_json(base, patched);
      if (k) j["kernel"] = k->to_json();
      fmt::print("{}\n", j.dump(2));
    } else {
      std::string text = comparison_text(base, patched);
      if (k) {
        text = kernel_keygc_text(*k) + "\n" + text + "\n" +
               three_columns(k->to_json(), base.to_json(), patched.to_json());
      }
      fmt::print("{}", text);
    }
    return;
  }
  const keygc_result r = run_keygc(config_for(o, o.mode));
  fmt::print("{}", o.json ? r.to_json().dump(2) + "\n" : result_text(r));
}

void validate(const keygc_cli& o) {
  // The ranges are checked while parsing (number_option.hpp); here, what depends on the
  // machine or on other options.
  if (o.config.cpu >= 0) require_cpu_in(system_topology().cpus(), o.config.cpu, "--cpu");
  if (o.kernel && o.compare) {
    throw usage_error(
        "--kernel runs the kernel alone; use --compare --with-kernel for three columns");
  }
  if (o.with_kernel && !o.compare) throw usage_error("--with-kernel: only with --compare");
  if (o.set_gc_delay && !o.kernel && !o.with_kernel) {
    throw usage_error("--set-gc-delay: only with --kernel or --with-kernel");
  }
  refuse_beyond_memory("--keys", std::to_string(o.config.keys), o.config.keys * bytes_per_key);
  for (const std::string* m : {&o.mode, &o.against}) {
    try {
      keys::parse_gc_mode(*m);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--mode/--against: ") + e.what());
    }
  }
}

const command_registrar keygc_command{
    {"keygc", [](CLI::App& app) {
       auto o = std::make_shared<keygc_cli>();
       auto* sub = app.add_subcommand(
           "keygc",
           "Seed 000: the key collector's execution times and the latency it inflicts "
           "on its CPU (keygcbench)");
       add_number(sub, "--keys", o->config.keys, "Keys in the population",
                  number_range<std::size_t>{1, max_keys});
       add_number(sub, "--per-keyring", o->config.per_keyring, "Keys per keyring",
                  number_range<std::size_t>{1, max_keys});
       sub->add_option("--mode", o->mode, "monolithic | chunked | budget")->capture_default_str();
       add_number(sub, "--chunk", o->config.chunk, "Chunk size (chunked mode)",
                  number_range<std::size_t>{1, max_keys});
       add_number(sub, "--slice-us", o->config.slice_us, "Time slice per execution (budget mode)",
                  number_range<double>{1, 10'000'000});
       add_number(sub, "--runs", o->config.runs, "Runs per mode (samples are pooled)",
                  number_range<int>{1, 1000});
       add_number(sub, "--probe-priority", o->config.probe_priority,
                  "SCHED_FIFO priority of the cyclictest-style probe threads (0: SCHED_OTHER)",
                  number_range<int>{0, 99});
       add_number(sub, "--cpu", o->config.cpu, "The collector's CPU (default: the last usable)",
                  number_range<int>{0, CPU_SETSIZE - 1});
       sub->add_flag("--compare", o->compare,
                     "Run the baseline (--against) and --mode side by side");
       sub->add_option("--against", o->against, "Baseline mode for --compare")
           ->capture_default_str();
       sub->add_flag("--kernel", o->kernel,
                     "Measure the host kernel's key_garbage_collector instead (keys in a "
                     "private keyring of the process)");
       sub->add_flag("--with-kernel", o->with_kernel,
                     "With --compare: the kernel as a third column, same population");
       add_number(sub, "--set-gc-delay", o->set_gc_delay,
                  "Kernel: set /proc/sys/kernel/keys/gc_delay to SECONDS for the run "
                  "(restored on exit) so the expired phase can run",
                  number_range<unsigned>{1, 31'536'000});
       sub->add_flag("--json", o->json, "One JSON object on stdout");
       sub->callback(traced(sub, [o] {
         validate(*o);
         run_command(*o);
       }));
     }}};

// The report's kernel column: the unused phase only (the report does not change gc_delay),
// or why the kernel keyring cannot be used here.
void add_kernel_column(nlohmann::json& j, const keygc_config& c) {
  if (auto why = kernel_keyring_unusable(c.keys, c.per_keyring)) {
    j["kernel_unusable"] = *why;
    return;
  }
  kernel_keygc_config k;
  k.keys = c.keys;
  k.per_keyring = c.per_keyring;
  try {
    j["kernel"] = run_kernel_keygc(k).to_json();
  } catch (const std::exception& e) {
    j["kernel_unusable"] = e.what();
  }
}

std::string markdown(const nlohmann::json& j) {
  auto row = [](const char* name, const nlohmann::json& s) {
    return fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", name,
                       s["n"].get<std::uint64_t>(), s["min_ms"].get<double>(),
                       s["avg_ms"].get<double>(), s["max_ms"].get<double>(),
                       s["var_ms2"].get<double>());
  };
  std::string md;
  for (const char* side : {"baseline", "patched"}) {
    const nlohmann::json& r = j[side];
    md += fmt::format(
        "**{}** ({}{}, {} keys): total task time {:.1f} ms; probe p50 {:.1f} us, "
        "p99 {:.1f} us, max {:.1f} us; hog reports {}\n\n",
        side, r["mode"].get<std::string>(),
        r["mode"] == "chunked" ? fmt::format(" {}", r["chunk"].get<int>()) : "",
        r["keys"].get<std::size_t>(), r["total_ms"].get<double>(),
        r["probe"]["p50_us"].get<double>(), r["probe"]["p99_us"].get<double>(),
        r["probe"]["max_us"].get<double>(), r["hog_reports"].get<int>());
    md += "| phase | n | min ms | avg ms | max ms | var ms^2 |\n|---|---|---|---|---|---|\n";
    md +=
        row("unused", r["unused"]) + row("expired", r["expired"]) + row("combined", r["combined"]);
    md += "\n";
  }
  md += fmt::format(
      "Ours: {:.1f}% drop in the combined variance, {:.1f}% {} in the total task "
      "time, {:.1f}% drop in the probe's max latency (seed: 93% drop, 2.2% "
      "increase).\n\n",
      j["variance_drop_pct"].get<double>(), std::abs(j["total_time_increase_pct"].get<double>()),
      j["total_time_increase_pct"].get<double>() >= 0 ? "increase" : "decrease",
      j["probe_max_drop_pct"].get<double>());
  md += "#### The host kernel's collector, same population\n\n";
  if (j.contains("kernel")) {
    md += three_columns(j["kernel"], j["baseline"], j["patched"]);
    md +=
        "\nThe cyclictest-style probe (a SCHED_FIFO thread per CPU waking on absolute 1 ms "
        "deadlines) shows what holds a CPU against the scheduler: the kernel's collector, on "
        "this non-preemptible kernel, does. quiesce's collectors are user-space threads that "
        "a waking FIFO thread preempts at once; what the monolithic one holds is its worker "
        "pool, which the work-item probe shows.\n\n";
  } else {
    md += fmt::format("Not measured: {}.\n\n", j.value("kernel_unusable", std::string("unknown")));
  }
  return md;
}

const experiment_registrar keygc_experiment{{"keygc", "000",
                                             "keygcbench: monolithic vs chunked (64) collector",
                                             [](const experiment_options& opt) {
                                               keygc_config c;
                                               c.keys = opt.quick ? 20'000 : 100'000;
                                               keygc_config base = c;
                                               base.mode = keys::gc_mode::monolithic;
                                               const keygc_result b = run_keygc(base);
                                               const keygc_result p = run_keygc(c);
                                               nlohmann::json j = comparison_json(b, p);
                                               add_kernel_column(j, c);
                                               return j;
                                             },
                                             markdown}};

}  // namespace
}  // namespace quiesce::cli
