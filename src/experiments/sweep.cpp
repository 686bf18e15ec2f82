// SPDX-License-Identifier: Apache-2.0
// Seed 000's chunk-size study (sweep.hpp).
#include "quiesce/experiments/sweep.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "quiesce/experiments/keygc.hpp"
#include "quiesce/experiments/spread.hpp"

namespace quiesce::experiments {

namespace {

bool within_throughput_budget(const sweep_row& r, double best_total, double within_pct) {
  return r.total_median() <= best_total * (1 + within_pct / 100);
}

bool spreads_overlap(const sweep_row& a, const sweep_row& b) {
  return a.var_max() >= b.var_min() && b.var_max() >= a.var_min();
}

std::string fitness_text(double within_pct) {
  return fmt::format(
      "a reasonable variance with a minimal throughput decline: the lowest median "
      "variance among sizes whose median total task time is within {}% of the best, "
      "chosen only if its variance across runs overlaps no other such size's",
      within_pct);
}

}  // namespace

double sweep_row::var_median() const {
  return median_of(variance_ms2);
}
double sweep_row::var_min() const {
  return min_of(variance_ms2);
}
double sweep_row::var_max() const {
  return max_of(variance_ms2);
}
double sweep_row::total_median() const {
  return median_of(total_ms);
}

sweep_choice choose(const std::vector<sweep_row>& rows, double within_pct) {
  sweep_choice c;
  double best_total = INFINITY;
  for (const auto& r : rows)
    best_total = std::min(best_total, r.total_median());
  const sweep_row* pick = nullptr;
  for (const auto& r : rows) {
    if (!within_throughput_budget(r, best_total, within_pct)) continue;
    c.candidates.push_back(r.chunk);
    if (!pick || r.var_median() < pick->var_median()) pick = &r;
  }
  if (!pick) return c;
  c.chunk = pick->chunk;
  for (const auto& r : rows) {
    if (&r == pick || !within_throughput_budget(r, best_total, within_pct)) continue;
    if (spreads_overlap(r, *pick)) c.overlapping.push_back(r.chunk);
  }
  c.separable = c.overlapping.empty();
  return c;
}

nlohmann::json sweep_result::to_json() const {
  nlohmann::json j = {{"keys", config.keys},
                      {"runs", config.runs},
                      {"within_pct", config.within_pct},
                      {"fitness", fitness_text(config.within_pct)},
                      {"chosen_chunk", choice.separable ? choice.chunk : 0},
                      {"lowest_variance_chunk", choice.chunk},
                      {"separable", choice.separable},
                      {"candidates", choice.candidates},
                      {"overlapping", choice.overlapping},
                      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows) {
    j["rows"].push_back({{"chunk", r.chunk},
                         {"var_ms2", r.var_median()},
                         {"var_ms2_min", r.var_min()},
                         {"var_ms2_max", r.var_max()},
                         {"total_ms", r.total_median()},
                         {"var_ms2_runs", r.variance_ms2},
                         {"total_ms_runs", r.total_ms}});
  }
  return j;
}

std::string sweep_result::choice_text() const {
  if (choice.chunk == 0) return "no size measured";
  if (choice.candidates.size() == 1) {
    return fmt::format("chunk {}: the only size whose total time is within {}% of the best",
                       choice.chunk, config.within_pct);
  }
  if (choice.separable) {
    return fmt::format(
        "chunk {}: the lowest median variance among the sizes within {}% of the best total "
        "time ({}), and in every run below every run of the others",
        choice.chunk, config.within_pct, fmt::join(choice.candidates, ", "));
  }
  return fmt::format(
      "none - the data cannot separate the sizes: chunk {} has the lowest median variance "
      "among those within {}% of the best total time, but its variance across runs overlaps "
      "that of chunk {}",
      choice.chunk, config.within_pct, fmt::join(choice.overlapping, ", "));
}

std::string sweep_result::text() const {
  std::string out =
      "chunk  median var (ms^2)  (min - max over runs)  median total task time (ms)\n";
  for (const auto& r : rows) {
    out += fmt::format("{:>5}  {:>17.6f}  ({:.6f} - {:.6f})  {:>20.3f}\n", r.chunk, r.var_median(),
                       r.var_min(), r.var_max(), r.total_median());
  }
  out += fmt::format("\nchosen: {} ({} keys, {} runs per size)\n", choice_text(), config.keys,
                     config.runs);
  return out;
}

std::string sweep_result::markdown() const {
  std::string md =
      "| chunk | median combined var (ms^2) | min - max over runs | median total task time "
      "(ms) |\n|---|---|---|---|\n";
  for (const auto& r : rows) {
    md += fmt::format("| {} | {:.6f} | {:.6f} - {:.6f} | {:.3f} |\n", r.chunk, r.var_median(),
                      r.var_min(), r.var_max(), r.total_median());
  }
  md += fmt::format(
      "\nFitness (the seed's words): {}.\n\nChosen: {} ({} keys, {} runs per size). The seed "
      "chose 64 from 1 .. 1024, 3 runs each.\n\n",
      fitness_text(config.within_pct), choice_text(), config.keys, config.runs);
  return md;
}

std::vector<plot_spec> sweep_result::plots() const {
  plot_spec variance{
      .name = "sweep-keygc-variance",
      .title = "Seed 000: combined variance of the collector's executions by chunk size",
      .caption =
          "The median variance per size (line) and each run's (points): where the runs "
          "of two sizes overlap, the data cannot tell them apart. The dashed line is "
          "the chosen size (or, if none, the lowest median).",
      .xlabel = "chunk size, keys per execution (log)",
      .ylabel = "variance, ms^2 (log)",
      .logx = true,
      .logy = true,
      .series = {},
      .marks = {}};
  plot_spec total{.name = "sweep-keygc-total",
                  .title = "Seed 000: total task time by chunk size",
                  .caption =
                      "The collector's total task time per size (median line, runs as "
                      "points): the throughput side of the fitness function.",
                  .xlabel = "chunk size, keys per execution (log)",
                  .ylabel = "total task time, ms",
                  .logx = true,
                  .logy = false,
                  .series = {},
                  .marks = {}};
  plot_series var_median{"median of runs", {}, "linespoints"};
  plot_series var_runs{"each run", {}, "points"};
  plot_series total_median{"median of runs", {}, "linespoints"};
  plot_series total_runs{"each run", {}, "points"};
  for (const auto& r : rows) {
    const auto x = static_cast<double>(r.chunk);
    var_median.points.emplace_back(x, r.var_median());
    total_median.points.emplace_back(x, r.total_median());
    for (double v : r.variance_ms2)
      var_runs.points.emplace_back(x, v);
    for (double t : r.total_ms)
      total_runs.points.emplace_back(x, t);
  }
  variance.series = {var_median, var_runs};
  total.series = {total_median, total_runs};
  if (choice.chunk != 0) {
    const std::string label = choice.separable
                                  ? fmt::format("chosen: {}", choice.chunk)
                                  : fmt::format("lowest median: {} (not separable)", choice.chunk);
    variance.marks.push_back({static_cast<double>(choice.chunk), label});
    total.marks.push_back({static_cast<double>(choice.chunk), label});
  }
  return {variance, total};
}

sweep_result run_sweep(const sweep_config& config,
                       const std::function<void(const std::string&)>& step) {
  sweep_result out;
  out.config = config;
  if (out.config.chunks.empty()) {
    for (std::size_t c = 1; c <= 1024; c *= 2)
      out.config.chunks.push_back(c);
  }
  for (std::size_t chunk : out.config.chunks) {
    sweep_row row;
    row.chunk = chunk;
    for (int run = 0; run < config.runs; ++run) {
      if (step) step(fmt::format("chunk {} run {}", chunk, run + 1));
      keygc_config c;
      c.keys = config.keys;
      c.chunk = chunk;
      c.runs = 1;
      const keygc_result r = run_keygc(c);
      row.variance_ms2.push_back(r.combined().variance() / 1e12);
      row.total_ms.push_back(r.total_ms());
    }
    out.rows.push_back(std::move(row));
  }
  out.choice = choose(out.rows, config.within_pct);
  return out;
}

}  // namespace quiesce::experiments
