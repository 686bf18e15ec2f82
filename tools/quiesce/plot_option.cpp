// SPDX-License-Identifier: Apache-2.0
// `--plot DIR` (plot_option.hpp).
#include "plot_option.hpp"

#include <fmt/format.h>

namespace quiesce::cli {

void add_plot_option(CLI::App* app, std::string& dir) {
  app->add_option("--plot", dir, "Write the experiment's plots into DIR (PNG, with their data)");
}

void write_plots(const std::string& dir, const std::vector<experiments::plot_spec>& plots) {
  if (dir.empty()) return;
  for (const experiments::plot_spec& p : plots) {
    const experiments::written_plot w = experiments::write_plot(dir, p);
    fmt::print(stderr, "quiesce: wrote {}\n", w.png.string());
  }
}

}  // namespace quiesce::cli
