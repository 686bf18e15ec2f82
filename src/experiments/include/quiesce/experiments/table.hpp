// SPDX-License-Identifier: Apache-2.0
// The experiments, listed once: what `quiesce report` runs, in order, each a row of
// {name, seed, title, run} (fsverity-utils' fsverity_commands[] is the model). A new
// experiment is its own files, one row in table.cpp and its test.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/verdict.hpp"

namespace quiesce::experiments {

// How a report run sizes an experiment.
struct experiment_options {
  bool quick = false;  // the whole report within a few minutes instead of ~20
  // Every experiment at its smallest size and fewest runs: the report's assembly (sections,
  // tables, plots, links) checked in seconds; its figures mean nothing (tests use it).
  bool smoke = false;
  // The host kernel's expired keygc phase: gc_delay for the run (root; restored after).
  std::optional<unsigned> set_gc_delay;
};

// An experiment's typed result, rendered for the report by the result's own to_json(),
// markdown() and plots() (every result type has the three).
struct experiment_output {
  nlohmann::json json;           // the object `quiesce NAME --json` prints
  std::string markdown;          // the section body (tables, the seed's numbers beside)
  std::vector<plot_spec> plots;  // drawn beside report.md, linked from it
  // Why it was not measured here (no /dev/fuse, a benchmark program not built), or empty.
  std::string skipped;
  // Its rows of the report's "what each patch bought here" (none for the runtime's rows).
  std::vector<bought_row> bought;
};

struct experiment {
  std::string_view name;   // the command that runs it alone, e.g. "keygc", "bench peers"
  std::string_view seed;   // "000", "003" or "004"; empty: the runtime itself (no seed)
  std::string_view title;  // the report's section heading
  // Runs it at the size `options` ask for. Throws what the experiment throws.
  experiment_output (*run)(const experiment_options& options);
};

// Every experiment, in the report's order (seed by seed, then the runtime's).
std::span<const experiment> all_experiments();

}  // namespace quiesce::experiments
