// SPDX-License-Identifier: Apache-2.0
// The CLI's two registries: subcommands (each file adds its own) and experiments (the
// seed reproductions that `quiesce report` runs). Registration happens during static
// initialisation through the registrar objects below; nothing here is thread-safe or
// needs to be, as main() reads the registries only after static initialisation.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/plot.hpp"

namespace quiesce::cli {

// A subcommand: `setup` adds it to the app (options and callback).
struct command {
  std::string name;
  std::function<void(CLI::App& app)> setup;
};

std::vector<command>& commands();

struct command_registrar {
  explicit command_registrar(command c) { commands().push_back(std::move(c)); }
};

// How a report run should size an experiment.
struct experiment_options {
  bool quick = false;  // the whole report within 1 minute instead of 5
  // Every experiment at its smallest size and fewest runs: the report's assembly (sections,
  // tables, plots, links) checked in seconds; its figures mean nothing (tests use it).
  bool smoke = false;
  // The host kernel's expired keygc phase: gc_delay for the run (root; restored after).
  std::optional<unsigned> set_gc_delay;
};

// What an experiment's typed result renders to for the report.
struct experiment_output {
  nlohmann::json json;   // the object `NAME --json` prints
  std::string markdown;  // the section body (tables, the seed's numbers beside)
  std::vector<experiments::plot_spec> plots;  // drawn beside report.md, linked from it
};

// A seed reproduction that `quiesce report` runs.
struct experiment {
  std::string name;  // the subcommand that runs it alone, e.g. "keygc"
  std::string seed;  // "000", "003" or "004": the seed it reproduces
  std::string title;
  // Runs the experiment and renders its result.
  std::function<experiment_output(const experiment_options&)> run;
};

std::vector<experiment>& experiments();

struct experiment_registrar {
  explicit experiment_registrar(experiment e) { experiments().push_back(std::move(e)); }
};

// Thrown by subcommands for bad input that the parser could not catch (a file that does
// not exist, an inconsistent combination): main prints one line and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace quiesce::cli
