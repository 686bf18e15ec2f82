// quiesce sweep keygc - the seed's chunk-size study: every chunk size x runs, the variance
// and total task time per size, and the size a stated fitness function picks.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "number_option.hpp"
#include "progress.hpp"
#include "quiesce/experiments/keygc.hpp"
#include "registry.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
using namespace quiesce::experiments;
namespace {

struct sweep_cli {
  std::string what;
  std::vector<std::size_t> chunks;
  int runs = 3;
  std::size_t keys = 100'000;  // the seed's population
  double within_pct = 5.0;
  bool json = false;
  std::string plot;
};

// One chunk size: each run measured alone (its own population), so the spread across runs
// shows whether two sizes differ at all.
struct sweep_row {
  std::size_t chunk = 0;
  std::vector<double> variance_ms2;  // per run: variance of the combined execution times
  std::vector<double> total_ms;      // per run: total task time
  double var_median() const { return median(variance_ms2); }
  double var_min() const { return *std::min_element(variance_ms2.begin(), variance_ms2.end()); }
  double var_max() const { return *std::max_element(variance_ms2.begin(), variance_ms2.end()); }
  double total_median() const { return median(total_ms); }

  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
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

bool within_throughput_budget(const sweep_row& r, double best_total, double within_pct) {
  return r.total_median() <= best_total * (1 + within_pct / 100);
}

bool spreads_overlap(const sweep_row& a, const sweep_row& b) {
  return a.var_max() >= b.var_min() && b.var_max() >= a.var_min();
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

nlohmann::json sweep_json(const sweep_cli& o, const std::vector<sweep_row>& rows,
                          const sweep_choice& c) {
  nlohmann::json j = {
      {"keys", o.keys},
      {"runs", o.runs},
      {"within_pct", o.within_pct},
      {"fitness",
       fmt::format("a reasonable variance with a minimal throughput decline: the lowest median "
                   "variance among sizes whose median total task time is within {}% of the best, "
                   "chosen only if its variance across runs overlaps no other such size's",
                   o.within_pct)},
      {"chosen_chunk", c.separable ? c.chunk : 0},
      {"lowest_variance_chunk", c.chunk},
      {"separable", c.separable},
      {"candidates", c.candidates},
      {"overlapping", c.overlapping},
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

// The choice, in one sentence from the JSON (text and Markdown alike).
std::string choice_text(const nlohmann::json& j) {
  const auto lowest = j["lowest_variance_chunk"].get<std::size_t>();
  if (lowest == 0) return "no size measured";
  const auto candidates = j["candidates"].get<std::vector<std::size_t>>();
  if (candidates.size() == 1) {
    return fmt::format("chunk {}: the only size whose total time is within {}% of the best", lowest,
                       j["within_pct"].get<double>());
  }
  if (j["separable"].get<bool>()) {
    return fmt::format(
        "chunk {}: the lowest median variance among the sizes within {}% of the best total "
        "time ({}), and in every run below every run of the others",
        lowest, j["within_pct"].get<double>(), fmt::join(candidates, ", "));
  }
  return fmt::format(
      "none - the data cannot separate the sizes: chunk {} has the lowest median variance "
      "among those within {}% of the best total time, but its variance across runs overlaps "
      "that of chunk {}",
      lowest, j["within_pct"].get<double>(),
      fmt::join(j["overlapping"].get<std::vector<std::size_t>>(), ", "));
}

void write_plot(const std::string& png, const std::vector<sweep_row>& rows) {
  const std::string data = png + ".dat";
  {
    std::ofstream out(data);
    for (const auto& r : rows)
      out << r.chunk << ' ' << r.var_median() << ' ' << r.total_median() << '\n';
  }
  const std::string script = fmt::format(
      "set terminal pngcairo size 900,500\nset output '{}'\nset logscale x 2\nset logscale y\n"
      "set xlabel 'chunk size (keys per execution)'\nset ylabel 'combined variance (ms^2)'\n"
      "set y2label 'total task time (ms)'\nset y2tics\nset ytics nomirror\nset key top center\n"
      "set title 'quiesce sweep keygc'\n"
      "plot '{}' using 1:2 with linespoints title 'variance' axes x1y1, "
      "'{}' using 1:3 with linespoints title 'total time' axes x1y2\n",
      png, data, data);
  FILE* gp = ::popen("gnuplot", "w");
  if (!gp) throw std::runtime_error("--plot: cannot run gnuplot (install gnuplot-nox)");
  std::fputs(script.c_str(), gp);
  const int rc = ::pclose(gp);
  std::filesystem::remove(data);
  if (rc != 0) throw std::runtime_error("--plot: gnuplot failed (exit " + std::to_string(rc) + ")");
}

std::vector<sweep_row> measure(const sweep_cli& o, const std::vector<std::size_t>& chunks) {
  progress_line progress("quiesce sweep keygc", chunks.size() * static_cast<std::size_t>(o.runs),
                         progress_wanted(o.json));
  std::vector<sweep_row> rows;
  for (std::size_t chunk : chunks) {
    sweep_row row;
    row.chunk = chunk;
    for (int run = 0; run < o.runs; ++run) {
      progress.step(fmt::format("chunk {} run {}", chunk, run + 1));
      keygc_config c;
      c.keys = o.keys;
      c.chunk = chunk;
      c.runs = 1;
      const keygc_result r = run_keygc(c);
      row.variance_ms2.push_back(r.combined().variance() / 1e12);
      row.total_ms.push_back(r.total_ms());
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

void run_sweep(const sweep_cli& o) {
  if (o.what != "keygc") throw usage_error("sweep: only 'keygc' can be swept");
  refuse_beyond_memory("--keys", std::to_string(o.keys), o.keys * bytes_per_key);
  std::vector<std::size_t> chunks = o.chunks;
  if (chunks.empty()) {
    for (std::size_t c = 1; c <= 1024; c *= 2)
      chunks.push_back(c);
  }
  const std::vector<sweep_row> rows = measure(o, chunks);
  const nlohmann::json j = sweep_json(o, rows, choose(rows, o.within_pct));
  if (!o.plot.empty()) write_plot(o.plot, rows);
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("chunk  median var (ms^2)  (min - max over runs)  median total task time (ms)\n");
  for (const auto& r : rows) {
    fmt::print("{:>5}  {:>17.6f}  ({:.6f} - {:.6f})  {:>20.3f}\n", r.chunk, r.var_median(),
               r.var_min(), r.var_max(), r.total_median());
  }
  fmt::print("\nchosen: {} ({} keys, {} runs per size)\n", choice_text(j), o.keys, o.runs);
  if (!o.plot.empty()) fmt::print("plot: {}\n", o.plot);
}

const command_registrar sweep_command{
    {"sweep", [](CLI::App& app) {
       auto o = std::make_shared<sweep_cli>();
       auto* sub =
           app.add_subcommand("sweep", "Parameter studies: 'sweep keygc' picks the chunk size");
       sub->add_option("what", o->what, "What to sweep: keygc")->required();
       add_number(sub, "--chunks", o->chunks, "Chunk sizes (default 1 2 4 ... 1024)",
                  number_range<std::size_t>{1, max_keys});
       add_number(sub, "--runs", o->runs, "Runs per size", number_range<int>{1, 1000});
       add_number(sub, "--keys", o->keys, "Keys in the population",
                  number_range<std::size_t>{1, max_keys});
       add_number(sub, "--within", o->within_pct,
                  "Fitness: lowest variance within this % of the best total time",
                  number_range<double>{0, 1000});
       sub->add_flag("--json", o->json, "One JSON object on stdout");
       sub->add_option("--plot", o->plot, "Write a PNG (gnuplot): variance and total time vs size");
       sub->callback(traced(sub, [o] { run_sweep(*o); }));
     }}};

const experiment_registrar sweep_experiment{
    {"sweep keygc", "000", "the chunk-size study (sizes 1 .. 1024, the seed's design)",
     rendered_from_json(
         [](const experiment_options& opt) {
           sweep_cli o;  // the seed's design: 100,000 keys, sizes 1 .. 1024, three runs each
           o.what = "keygc";
           if (opt.quick) {
             o.runs = 2;
             o.keys = 5'000;
           }
           std::vector<std::size_t> chunks;
           for (std::size_t c = 1; c <= 1024; c *= opt.quick ? 8 : 2)
             chunks.push_back(c);
           const auto rows = measure(o, chunks);
           return sweep_json(o, rows, choose(rows, o.within_pct));
         },
         [](const nlohmann::json& j) {
           std::string md =
               "| chunk | median combined var (ms^2) | min - max over runs | median total task "
               "time "
               "(ms) |\n|---|---|---|---|\n";
           for (const auto& r : j["rows"]) {
             md += fmt::format("| {} | {:.6f} | {:.6f} - {:.6f} | {:.3f} |\n",
                               r["chunk"].get<std::size_t>(), r["var_ms2"].get<double>(),
                               r["var_ms2_min"].get<double>(), r["var_ms2_max"].get<double>(),
                               r["total_ms"].get<double>());
           }
           md += fmt::format(
               "\nFitness (the seed's words): {}.\n\nChosen: {} ({} keys, {} runs per size). The "
               "seed "
               "chose 64 from 1 .. 1024, 3 runs each.\n\n",
               j["fitness"].get<std::string>(), choice_text(j), j["keys"].get<std::size_t>(),
               j["runs"].get<int>());
           return md;
         })}};

}  // namespace
}  // namespace quiesce::cli
