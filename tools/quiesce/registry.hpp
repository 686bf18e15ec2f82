// The CLI's two registries: subcommands (each file adds its own) and experiments (the
// seed reproductions that `quiesce report` runs). Registration happens during static
// initialisation through the registrar objects below; nothing here is thread-safe or
// needs to be, as main() reads the registries only after static initialisation.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
};

// A seed reproduction that `quiesce report` runs.
struct experiment {
  std::string name;  // the subcommand that runs it alone, e.g. "keygc"
  std::string seed;  // "000", "003" or "004": the seed it reproduces
  std::string title;
  // Runs the experiment and returns its results (the object `NAME --json` prints).
  std::function<nlohmann::json(const experiment_options&)> run;
  // Renders those results as a Markdown section body (tables, the seed's numbers beside).
  std::function<std::string(const nlohmann::json&)> markdown;
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
