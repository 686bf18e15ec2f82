// SPDX-License-Identifier: Apache-2.0
// quiesce keygc - keygcbench for quiesce (seed 000): the key collector's execution times
// and the latency it inflicts on its CPU's pool, monolithic vs chunked vs budget.
#include <fmt/format.h>

#include <optional>

#include "commands.hpp"
#include "number_option.hpp"
#include "plot_option.hpp"
#include "progress.hpp"
#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/keygc_compare.hpp"
#include "quiesce/host/cyclictest.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

struct keygc_cli {
  keygc_config config;
  std::string mode = "chunked";
  std::string against = "monolithic";
  std::string also;  // --compare: a third collector's mode, or empty
  bool compare = false;
  bool kernel = false;       // the host kernel's collector only
  bool with_kernel = false;  // --compare plus the kernel as a third column
  std::optional<unsigned> set_gc_delay;
  bool cyclictest = false;  // kernel phases: Debian's cyclictest beside the probe
  bool json = false;
  std::string plot_dir;  // --plot DIR
};

kernel_keygc_config kernel_config_for(const keygc_cli& o) {
  kernel_keygc_config k;
  k.keys = o.config.keys;
  k.per_keyring = o.config.per_keyring;
  k.runs = o.config.runs;
  k.cpu = o.config.cpu;
  k.set_gc_delay = o.set_gc_delay;
  k.probe_priority = o.config.probe_priority;
  k.cyclictest = o.cyclictest;
  return k;
}

keygc_config config_for(const keygc_cli& o, const std::string& mode) {
  keygc_config c = o.config;
  c.mode = keys::parse_gc_mode(mode);
  return c;
}

void run_command(const keygc_cli& o) {
  if (o.kernel) {
    const kernel_keygc_result k = run_kernel_keygc(kernel_config_for(o));
    fmt::print("{}", o.json ? k.to_json().dump(2) + "\n" : kernel_keygc_text(k));
    return;
  }
  if (o.compare) {
    progress_line progress("quiesce keygc --compare",
                           (o.with_kernel ? 1 : 0) +
                               (o.also.empty() ? 2u : 3u) * static_cast<std::size_t>(o.config.runs),
                           progress_wanted(o.json));
    std::optional<kernel_keygc_result> kernel;
    if (o.with_kernel) {
      progress.step("the host kernel's collector");
      kernel = run_kernel_keygc(kernel_config_for(o));
    }
    std::optional<keygc_config> also;
    if (!o.also.empty()) also = config_for(o, o.also);
    keygc_comparison_result r = run_keygc_comparison(
        config_for(o, o.against), config_for(o, o.mode), o.config.runs,
        [&](const std::string& s) { progress.step(s); }, also);
    r.kernel = std::move(kernel);
    fmt::print("{}", o.json ? r.to_json().dump(2) + "\n" : r.text());
    write_plots(o.plot_dir, r.plots());
    return;
  }
  const keygc_result r = run_keygc(config_for(o, o.mode));
  fmt::print("{}", o.json ? r.to_json().dump(2) + "\n" : keygc_text(r));
  write_plots(o.plot_dir, keygc_plots({&r}));
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
  if (!o.also.empty() && !o.compare) throw usage_error("--also: only with --compare");
  if (o.cyclictest && !o.kernel && !o.with_kernel) {
    throw usage_error("--cyclictest: only with --kernel or --with-kernel");
  }
  if (o.cyclictest) {
    if (auto why = host::cyclictest_unavailable()) throw usage_error("--cyclictest: " + *why);
  }
  if (o.kernel && !o.plot_dir.empty()) {
    throw usage_error("--plot: the kernel alone has no plots; use --compare --with-kernel");
  }
  if (o.set_gc_delay && !o.kernel && !o.with_kernel) {
    throw usage_error("--set-gc-delay: only with --kernel or --with-kernel");
  }
  refuse_beyond_memory("--keys", std::to_string(o.config.keys), o.config.keys * bytes_per_key);
  for (const std::string* m : {&o.mode, &o.against, &o.also}) {
    if (m->empty() && m == &o.also) continue;
    try {
      keys::parse_gc_mode(*m);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--mode/--against/--also: ") + e.what());
    }
  }
}

}  // namespace

void add_keygc_command(CLI::App& app) {
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
  add_number(sub, "--runs", o->config.runs,
             "Runs per mode (samples are pooled; --compare: pairs of runs, each figure's "
             "spread quoted)",
             number_range<int>{1, 1000});
  add_number(sub, "--probe-priority", o->config.probe_priority,
             "SCHED_FIFO priority of the cyclictest-style probe threads (0: SCHED_OTHER)",
             number_range<int>{0, 99});
  add_number(sub, "--cpu", o->config.cpu, "The collector's CPU (default: the last usable)",
             number_range<int>{0, CPU_SETSIZE - 1});
  sub->add_flag("--compare", o->compare, "Run the baseline (--against) and --mode side by side");
  sub->add_option("--against", o->against, "Baseline mode for --compare")->capture_default_str();
  sub->add_option("--also", o->also,
                  "With --compare: a third collector's mode (e.g. budget), run in each "
                  "pair between the two");
  sub->add_flag("--kernel", o->kernel,
                "Measure the host kernel's key_garbage_collector instead (keys in a "
                "private keyring of the process)");
  sub->add_flag("--with-kernel", o->with_kernel,
                "With --compare: the kernel as a third column, same population");
  add_number(sub, "--set-gc-delay", o->set_gc_delay,
             "Kernel: set /proc/sys/kernel/keys/gc_delay to SECONDS for the run "
             "(restored on exit) so the expired phase can run",
             number_range<unsigned>{1, 31'536'000});
  sub->add_flag("--cyclictest", o->cyclictest,
                "Kernel phases: run Debian's cyclictest (rt-tests) on the collector's CPU "
                "beside the probe, same priority and 1 ms interval");
  sub->add_flag("--json", o->json, "One JSON object on stdout");
  add_plot_option(sub, o->plot_dir);
  sub->callback(traced(sub, [o] {
    validate(*o);
    run_command(*o);
  }));
}

}  // namespace quiesce::cli
