// SPDX-License-Identifier: Apache-2.0
// quiesce sanitize - seed 003: a page-sanitizing loop on a Tasks-registered thread, and the
// boot whose trampoline attach waits for an RCU Tasks grace period.
#include <fmt/format.h>

#include <cmath>

#include "commands.hpp"
#include "number_option.hpp"
#include "plot_option.hpp"
#include "quiesce/experiments/sanitize_boot.hpp"
#include "quiesce/sanitize.hpp"
#include "quiesce/summary.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
namespace {

using experiments::boot_options;
using experiments::boot_result;
using experiments::sanitize_comparison_result;
using sanitize::qs_policy;

struct sanitize_cli {
  std::string qs = "tasks-qs";
  std::size_t pages = 32768;
  double seconds = 3.0;  // the loop's target duration, for calibrating the page cost
  double fail_share = 0.01;
  bool compare = false;
  int pairs = 1;  // --compare: pairs of boots
  bool json = false;
  std::string plot_dir;
};

boot_options options_for(const sanitize_cli& o, qs_policy policy, unsigned passes) {
  boot_options b;
  b.sanitizer.pages = o.pages;
  b.sanitizer.passes = passes;
  b.sanitizer.fail_share = o.fail_share;
  b.sanitizer.policy = policy;
  return b;
}

std::string thresholds(const boot_options& b) {
  return fmt::format(
      "(stall detector scaled to the run: info at {} ms then x3, stall at {} ms, "
      "hung waiter at {} ms; the kernel's are 10 s, 10 min, 120 s)\n",
      b.info.count() / 1'000'000, b.stall.count() / 1'000'000, b.hung.count() / 1'000'000);
}

void validate(const sanitize_cli& o) {
  refuse_beyond_memory("--pages", std::to_string(o.pages), o.pages * std::uint64_t{4096});
  if (!(o.fail_share >= 0 && o.fail_share <= 1)) {
    throw usage_error(fmt::format("--fail-share: {} is outside [0, 1]", o.fail_share));
  }
  if (!(o.seconds > 0)) throw usage_error("--seconds: must be positive");
  try {
    sanitize::parse_qs_policy(o.qs);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--qs: ") + e.what());
  }
}

unsigned calibrated(const sanitize_cli& o) {
  return sanitize::calibrate_passes(
      o.pages, std::chrono::nanoseconds(static_cast<std::int64_t>(o.seconds * 1e9)));
}

}  // namespace

void add_sanitize_command(CLI::App& app) {
  auto o = std::make_shared<sanitize_cli>();
  auto* sub = app.add_subcommand(
      "sanitize",
      "Seed 003: an EPC-sanitizing loop holds every RCU Tasks grace period unless "
      "it reports quiescent states");
  sub->add_option("--qs", o->qs, "none | resched | tasks-qs")->capture_default_str();
  add_number(sub, "--pages", o->pages, "4 KiB pages to sanitize",
             number_range<std::size_t>{1, std::size_t{1} << 28});
  add_number(sub, "--seconds", o->seconds, "About how long the loop should take",
             number_range<double>{0.001, 3600});
  add_number(sub, "--fail-share", o->fail_share, "Share of pages left dirty on the first pass",
             number_range<double>{0, 1});
  sub->add_flag("--compare", o->compare, "resched (the bug) vs tasks-qs (the fix), one process");
  add_number(sub, "--runs", o->pairs,
             "With --compare: pairs of boots (each figure's spread is quoted)",
             number_range<int>{1, 100});
  sub->add_flag("--json", o->json, "One JSON object on stdout");
  add_plot_option(sub, o->plot_dir);
  sub->callback(traced(sub, [o] {
    validate(*o);
    const unsigned passes = calibrated(*o);
    if (o->compare) {
      const boot_options bo = options_for(*o, qs_policy::resched, passes);
      const sanitize_comparison_result c = experiments::run_sanitize_comparison(bo, o->pairs);
      fmt::print("{}", o->json ? c.to_json().dump(2) + "\n" : thresholds(bo) + c.text());
      write_plots(o->plot_dir, c.plots());
      return;
    }
    const boot_options bo = options_for(*o, sanitize::parse_qs_policy(o->qs), passes);
    const boot_result r = experiments::run_boot(bo);
    fmt::print("{}", o->json ? r.to_json().dump(2) + "\n" : thresholds(bo) + r.text());
    write_plots(o->plot_dir, experiments::boot_plots({&r}));
  }));
}

}  // namespace quiesce::cli
