// SPDX-License-Identifier: Apache-2.0
// Seed 000's chunk-size study (`quiesce sweep keygc`): every chunk size measured in runs of
// its own, the variance and total task time per size, and the size the seed's fitness
// function picks - only where the runs can tell the sizes apart.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quiesce/experiments/plot.hpp"

namespace quiesce::experiments {

struct sweep_config {
  std::vector<std::size_t> chunks;  // empty: 1, 2, 4 .. 1024
  int runs = 3;
  std::size_t keys = 100'000;  // the seed's population
  double within_pct = 5.0;     // the throughput budget of the fitness function
};

// One chunk size: each run measured alone (its own population), so the spread across runs
// shows whether two sizes differ at all.
struct sweep_row {
  std::size_t chunk = 0;
  std::vector<double> variance_ms2;  // per run: variance of the combined execution times
  std::vector<double> total_ms;      // per run: total task time
  double var_median() const;
  double var_min() const;
  double var_max() const;
  double total_median() const;
};

// The seed's fitness function, in its words: "a reasonable variance with a minimal
// throughput decline". Here: among the sizes whose median total task time is within
// `within_pct` of the best median, the lowest median variance. And whether the data
// separates it: its variance in every run is below every run's variance of each other
// candidate (the spreads across runs do not overlap). If they overlap, the runs cannot
// tell those sizes apart and no size is chosen.
struct sweep_choice {
  std::size_t chunk = 0;                 // the candidate with the lowest median variance
  bool separable = false;                // chunk's spread overlaps no other candidate's
  std::vector<std::size_t> candidates;   // within the throughput budget
  std::vector<std::size_t> overlapping;  // candidates whose variance spread overlaps chunk's
};
sweep_choice choose(const std::vector<sweep_row>& rows, double within_pct);

struct sweep_result {
  sweep_config config;
  std::vector<sweep_row> rows;
  sweep_choice choice;

  nlohmann::json to_json() const;
  std::string choice_text() const;  // the choice in one sentence
  std::string text() const;         // the table and the choice
  std::string markdown() const;
  // Variance (median, with each run's) and total time against chunk size, the chosen size
  // (or the lowest-variance one, when the data cannot separate) marked.
  std::vector<plot_spec> plots() const;
};

// Runs the study; `step` is told each run before it starts ("chunk 64 run 2").
sweep_result run_sweep(const sweep_config& config,
                       const std::function<void(const std::string&)>& step = {});

}  // namespace quiesce::experiments
