// SPDX-License-Identifier: Apache-2.0
// `--plot DIR` for an experiment command: its plots (quiesce/experiments/plot.hpp) written
// into DIR as PNG, with the data file and gnuplot script beside each.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "quiesce/experiments/plot.hpp"

namespace quiesce::cli {

// Adds `--plot DIR` to `app`, stored in `dir`.
void add_plot_option(CLI::App* app, std::string& dir);

// Writes every plot into `dir` (nothing if `dir` is empty), naming each PNG on stderr.
// Throws what write_plot throws.
void write_plots(const std::string& dir, const std::vector<experiments::plot_spec>& plots);

}  // namespace quiesce::cli
