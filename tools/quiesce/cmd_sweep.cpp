// quiesce sweep keygc - the seed's chunk-size study: every chunk size x runs, the variance
// and total task time per size, and the size a stated fitness function picks.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "keygc_experiment.hpp"
#include "number_option.hpp"
#include "progress.hpp"
#include "registry.hpp"

namespace quiesce::cli {
namespace {

struct sweep_cli {
  std::string what;
  std::vector<std::size_t> chunks;
  int runs = 3;
  std::size_t keys = 20'000;
  double within_pct = 5.0;
  bool json = false;
  std::string plot;
};

struct sweep_row {
  std::size_t chunk;
  double variance_ms2;  // combined, pooled over the runs
  double total_ms;      // mean total task time per run
};

// The fitness function: the lowest variance among sizes whose total time is within
// `within_pct` of the best total time.
std::size_t choose(const std::vector<sweep_row>& rows, double within_pct) {
  double best_total = INFINITY;
  for (const auto& r : rows)
    best_total = std::min(best_total, r.total_ms);
  const sweep_row* pick = nullptr;
  for (const auto& r : rows) {
    if (r.total_ms > best_total * (1 + within_pct / 100)) continue;
    if (!pick || r.variance_ms2 < pick->variance_ms2) pick = &r;
  }
  return pick ? pick->chunk : 0;
}

void write_plot(const std::string& png, const std::vector<sweep_row>& rows) {
  const std::string data = png + ".dat";
  {
    std::ofstream out(data);
    for (const auto& r : rows)
      out << r.chunk << ' ' << r.variance_ms2 << ' ' << r.total_ms << '\n';
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

nlohmann::json sweep_json(const sweep_cli& o, const std::vector<sweep_row>& rows,
                          std::size_t chosen) {
  nlohmann::json j = {{"keys", o.keys},
                      {"runs", o.runs},
                      {"within_pct", o.within_pct},
                      {"chosen_chunk", chosen},
                      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows) {
    j["rows"].push_back(
        {{"chunk", r.chunk}, {"var_ms2", r.variance_ms2}, {"total_ms", r.total_ms}});
  }
  return j;
}

std::vector<sweep_row> measure(const sweep_cli& o, const std::vector<std::size_t>& chunks) {
  progress_line progress("quiesce sweep keygc", chunks.size(), progress_wanted(o.json));
  std::vector<sweep_row> rows;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    progress.step(fmt::format("chunk {}", chunks[i]));
    keygc_config c;
    c.keys = o.keys;
    c.chunk = chunks[i];
    c.runs = o.runs;
    const keygc_result r = run_keygc(c);
    rows.push_back({chunks[i], r.combined().variance() / 1e12, r.total_ms() / o.runs});
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
  const std::size_t chosen = choose(rows, o.within_pct);
  if (!o.plot.empty()) write_plot(o.plot, rows);
  if (o.json) {
    fmt::print("{}\n", sweep_json(o, rows, chosen).dump(2));
    return;
  }
  fmt::print("chunk  combined var (ms^2)  total task time (ms)\n");
  for (const auto& r : rows)
    fmt::print("{:>5}  {:>20.6f}  {:>20.3f}\n", r.chunk, r.variance_ms2, r.total_ms);
  fmt::print(
      "\nchosen: chunk {} - the lowest variance whose total time is within {}% of the "
      "best ({} keys, runs per size: {})\n",
      chosen, o.within_pct, o.keys, o.runs);
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
       sub->callback([o] { run_sweep(*o); });
     }}};

const experiment_registrar sweep_experiment{
    {"sweep keygc", "000", "the chunk-size study (sizes 1 .. 1024)",
     [](const experiment_options& opt) {
       sweep_cli o;
       o.what = "keygc";
       o.runs = opt.quick ? 1 : 2;
       o.keys = opt.quick ? 5'000 : 20'000;
       std::vector<std::size_t> chunks;
       for (std::size_t c = 1; c <= 1024; c *= opt.quick ? 8 : 2)
         chunks.push_back(c);
       const auto rows = measure(o, chunks);
       return sweep_json(o, rows, choose(rows, o.within_pct));
     },
     [](const nlohmann::json& j) {
       std::string md = "| chunk | combined var (ms^2) | total task time (ms) |\n|---|---|---|\n";
       for (const auto& r : j["rows"]) {
         md += fmt::format("| {} | {:.6f} | {:.3f} |\n", r["chunk"].get<std::size_t>(),
                           r["var_ms2"].get<double>(), r["total_ms"].get<double>());
       }
       md += fmt::format(
           "\nChosen: chunk {} (lowest variance within {}% of the best total time; "
           "{} keys, {} runs per size). The seed chose 64 from 1..1024, 3 runs each.\n\n",
           j["chosen_chunk"].get<std::size_t>(), j["within_pct"].get<double>(),
           j["keys"].get<std::size_t>(), j["runs"].get<int>());
       return md;
     }}};

}  // namespace
}  // namespace quiesce::cli
