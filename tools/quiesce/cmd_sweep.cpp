// SPDX-License-Identifier: Apache-2.0
// quiesce sweep keygc - the seed's chunk-size study (quiesce/experiments/sweep.hpp): flags
// and printing.
#include <fmt/format.h>

#include "commands.hpp"
#include "number_option.hpp"
#include "plot_option.hpp"
#include "progress.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/sweep.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

struct sweep_cli {
  std::string what;
  sweep_config config;
  bool json = false;
  std::string plot_dir;
};

void run_sweep_command(const sweep_cli& o) {
  if (o.what != "keygc") throw usage_error("sweep: only 'keygc' can be swept");
  refuse_beyond_memory("--keys", std::to_string(o.config.keys), o.config.keys * bytes_per_key);
  const std::size_t sizes = o.config.chunks.empty() ? 11 : o.config.chunks.size();
  progress_line progress("quiesce sweep keygc", sizes * static_cast<std::size_t>(o.config.runs),
                         progress_wanted(o.json));
  const sweep_result r =
      run_sweep(o.config, [&](const std::string& phase) { progress.step(phase); });
  fmt::print("{}", o.json ? r.to_json().dump(2) + "\n" : r.text());
  write_plots(o.plot_dir, r.plots());
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<sweep_cli>();
  auto* sub = app.add_subcommand("sweep", "Parameter studies: 'sweep keygc' picks the chunk size");
  sub->add_option("what", o->what, "What to sweep: keygc")->required();
  add_number(sub, "--chunks", o->config.chunks, "Chunk sizes (default 1 2 4 ... 1024)",
             number_range<std::size_t>{1, max_keys});
  add_number(sub, "--runs", o->config.runs, "Runs per size", number_range<int>{1, 1000});
  add_number(sub, "--keys", o->config.keys, "Keys in the population",
             number_range<std::size_t>{1, max_keys});
  add_number(sub, "--within", o->config.within_pct,
             "Fitness: lowest variance within this % of the best total time",
             number_range<double>{0, 1000});
  sub->add_flag("--json", o->json, "One JSON object on stdout");
  add_plot_option(sub, o->plot_dir);
  sub->callback(traced(sub, [o] { run_sweep_command(*o); }));
}

}  // namespace quiesce::cli
