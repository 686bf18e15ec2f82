// SPDX-License-Identifier: Apache-2.0
// quiesce bench peers - the runtime against the libraries a user would pick instead
// (quiesce/experiments/peers.hpp): the ratio table, and how quiesce's cost grows with work.
#include <fmt/format.h>

#include "commands.hpp"
#include "number_option.hpp"
#include "plot_option.hpp"
#include "quiesce/experiments/peers.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

struct bench_options {
  peers_options peers;
  bool json = false;
  bool quick = false;
  bool smoke = false;
  std::string plot_dir;
};

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* sub = app.add_subcommand("bench", "Benchmarks of the runtime");
  sub->require_subcommand(1);
  auto* peers = sub->add_subcommand(
      "peers",
      "quiesce against a mutex+condvar pool, oneTBB, Boost.Asio and liburcu, side by side "
      "(runs bench_wq and bench_rcu from beside this program)");
  auto opt = std::make_shared<bench_options>();
  add_number(peers, "--repetitions", opt->peers.repetitions,
             "Repetitions of every measurement (medians are quoted)", number_range<int>{1, 50});
  peers->add_flag("--quick", opt->quick,
                  "Only the ratio table (not how throughput and latency grow with work), "
                  "a retire flood of 1 s (not 10), and of the SHA-256 implementations only "
                  "OpenSSL and the chosen one");
  peers
      ->add_flag("--smoke", opt->smoke,
                 "As --quick, at a twentieth of the sizes and a 0.2 s retire flood: a check "
                 "that every row runs, in seconds; its figures measure nothing")
      ->excludes(peers->get_option("--quick"));
  peers->add_flag("--json", opt->json, "Print the results as one JSON object on stdout");
  add_plot_option(peers, opt->plot_dir);
  peers->callback([opt] {
    opt->peers.growth = !opt->quick;
    opt->peers.every_sha256 = !opt->quick;
    if (opt->quick) opt->peers.flood_seconds = 1;
    if (opt->smoke) make_smoke(opt->peers);
    const peers_result r = run_peers(opt->peers);
    if (opt->json) {
      fmt::print("{}\n", r.to_json().dump(2));
    } else {
      fmt::print("{}", r.markdown());
    }
    write_plots(opt->plot_dir, r.plots());
  });
}

}  // namespace quiesce::cli
