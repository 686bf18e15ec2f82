// SPDX-License-Identifier: Apache-2.0
// quiesce report - runs every experiment of the table (quiesce/experiments/table.hpp) and
// writes DIR/report.md and DIR/results.json: the seeds' in seed order, each beside the
// seed's published numbers, then the runtime's own (no seed).
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cctype>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "../../src/base/file_io.hpp"
#include "commands.hpp"
#include "number_option.hpp"
#include "progress.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/experiments/machine.hpp"
#include "quiesce/experiments/table.hpp"
#include "quiesce/version.hpp"
#include "seeds.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

namespace fs = std::filesystem;

struct report_options {
  std::string out = "quiesce-report";
  bool quick = false;
  bool smoke = false;
  std::optional<unsigned> set_gc_delay;  // the kernel's expired keygc phase
  std::string trace_dir;                 // --trace DIR: one Chrome trace per experiment
};

// DIR/NAME.trace.json for experiment `name`, each run of other characters than letters and
// digits one '-' ("sweep keygc" -> sweep-keygc.trace.json, "verity bench --mount" ->
// verity-bench-mount.trace.json).
std::string trace_path(const report_options& opt, const std::string& name) {
  if (opt.trace_dir.empty()) return {};
  std::string file;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      file += c;
    } else if (!file.empty() && file.back() != '-') {
      file += '-';
    }
  }
  return (fs::path(opt.trace_dir) / (file + ".trace.json")).string();
}

// Draws `plots` beside report.md and returns their Markdown; a plot that cannot be drawn
// is named in the section and in results.json's "failed" (the report goes on).
std::string plots_markdown(const std::string& out, const std::vector<experiments::plot_spec>& plots,
                           nlohmann::json& failed, const std::string& experiment) {
  std::string md;
  for (const experiments::plot_spec& p : plots) {
    try {
      md += experiments::plot_markdown(experiments::write_plot(out, p), out);
    } catch (const std::exception& ex) {
      failed[experiment + " plot " + p.name] = ex.what();
      md += fmt::format("Plot {} not drawn: {}\n\n", p.name, ex.what());
    }
  }
  return md;
}

int run_report(const report_options& opt) {
  std::error_code ec;
  fs::create_directories(opt.out, ec);
  if (ec) throw usage_error(fmt::format("--out: cannot create '{}': {}", opt.out, ec.message()));

  const std::uint64_t started = now_ns();
  nlohmann::json results;
  results["quiesce_version"] = version_string;
  const std::string generated_at =
      fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
  results["generated_at"] = generated_at;
  results["quick"] = opt.quick;
  results["smoke"] = opt.smoke;
  fmt::print(stderr, "quiesce report: measuring the machine...\n");
  const machine_facts machine = measure_machine();
  results["machine"] = machine.to_json();
  results["experiments"] = nlohmann::json::object();
  results["not_built"] = nlohmann::json::array();
  results["failed"] = nlohmann::json::object();

  const std::string head = fmt::format(
      "# quiesce report\n\nquiesce {}, {}{}.\n\n## Machine\n\n{}\n", version_string, generated_at,
      opt.smoke   ? ", SMOKE run (smallest sizes: the figures mean nothing)"
      : opt.quick ? ", quick run (smaller populations)"
                  : "",
      machine.markdown());
  std::string md;  // the sections after the summary, which is known only at the end
  std::vector<bought_row> bought;
  const experiment_options eopt{
      .quick = opt.quick, .smoke = opt.smoke, .set_gc_delay = opt.set_gc_delay};
  // On a terminal, one progress line replaces the "running ..." lines.
  const bool draw = progress_wanted(false);
  progress_line progress("quiesce report", all_experiments().size(), draw);
  auto announce = [&](const std::string& phase) {
    if (draw) {
      progress.step(phase);
    } else {
      fmt::print(stderr, "quiesce report: running {}...\n", phase);
    }
  };
  auto run = [&](const experiment& e) {
    const std::string name(e.name);
    announce(e.seed.empty() ? name : fmt::format("{} (seed {})", name, e.seed));
    md += fmt::format("### {} (`quiesce {}`)\n\n", e.title, name);
    try {
      trace_session trace(trace_path(opt, name));
      experiment_output r = e.run(eopt);
      trace.write();
      results["experiments"][name] = std::move(r.json);
      bought.insert(bought.end(), r.bought.begin(), r.bought.end());
      md += r.markdown + "\n";
      md += plots_markdown(opt.out, r.plots, results["failed"], name);
    } catch (const std::exception& ex) {
      results["failed"][name] = ex.what();
      md += fmt::format("FAILED: {}\n\n", ex.what());
    }
  };
  for (const seed& s : seeds()) {
    md += fmt::format("## Seed {}: {}\n\nThe bug: {}.\n\nPublished: {}\n\n", s.id, s.patch,
                      s.problem, s.published);
    bool any = false;
    for (const experiment& e : all_experiments()) {
      if (e.seed != s.id) continue;
      any = true;
      run(e);
    }
    if (!any) {
      results["not_built"].push_back(s.id);
      md += fmt::format(
          "Ours: not built yet - `quiesce {}` does not exist in this build, so "
          "there is nothing to measure.\n\n",
          s.experiment);
    }
  }
  md += "## The runtime itself\n\n";
  for (const experiment& e : all_experiments()) {
    if (e.seed.empty()) run(e);
  }
  const double seconds = static_cast<double>(now_ns() - started) / 1e9;
  results["duration_s"] = seconds;
  md += fmt::format("---\nReport generated in {:.1f} s.\n", seconds);
  results["bought"] = nlohmann::json::array();
  for (const bought_row& b : bought)
    results["bought"].push_back(b.to_json());
  md = head + "## What each patch bought here\n\n" + bought_markdown(bought) + md;

  write_file_atomically(fs::path(opt.out) / "results.json", {results.dump(2), "\n"});
  write_file_atomically(fs::path(opt.out) / "report.md", {md});
  fmt::print("{}", md);
  fmt::print(stderr, "quiesce report: wrote {0}/report.md and {0}/results.json\n", opt.out);
  return results["failed"].empty() ? 0 : 1;
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "report", "Run every experiment and write DIR/report.md and DIR/results.json");
  auto opt = std::make_shared<report_options>();
  sub->add_option("--out", opt->out, "Directory for report.md and results.json")
      ->capture_default_str();
  sub->add_flag("--quick", opt->quick,
                "Smaller populations, and the peers without the growth tables: a shorter report");
  sub->add_flag("--smoke", opt->smoke,
                "Every experiment at its smallest size, one run: checks that the report "
                "assembles in seconds (its figures mean nothing)");
  add_number(sub, "--set-gc-delay", opt->set_gc_delay,
             "Seed 000: set /proc/sys/kernel/keys/gc_delay to SECONDS while the host "
             "kernel's expired phase runs (root; restored on exit)",
             number_range<unsigned>{1, 31'536'000});
  sub->add_option("--trace", opt->trace_dir,
                  "Write DIR/EXPERIMENT.trace.json (Chrome trace, Perfetto) per experiment");
  sub->callback([opt] {
    if (!opt->trace_dir.empty()) fs::create_directories(opt->trace_dir);
    if (const int rc = run_report(*opt); rc != 0) throw std::runtime_error("an experiment failed");
  });
}

}  // namespace quiesce::cli
