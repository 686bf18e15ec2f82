// SPDX-License-Identifier: Apache-2.0
// Plots: the writer's refusals (unit), and each experiment command's --plot DIR as a user
// runs it: valid PNGs drawn from data files that hold exactly the numbers the command's
// JSON reports, and the report's links to them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/verdict.hpp"
#include "quiesce/experiments/verity_mount_bench.hpp"
#include "shell.hpp"

namespace quiesce::experiments {
namespace {

namespace fs = std::filesystem;
using points = std::vector<std::pair<double, double>>;

class Plots : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiesce-plots-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the CLI with stdout into a file; returns the exit code.
  int run(const std::string& args, std::string& out) {
    const fs::path stdout_file = dir_ / "stdout";
    const std::string cmd = std::string(QUIESCE_CLI) + " " + args + " >" + stdout_file.string() +
                            " 2>" + (dir_ / "stderr").string();
    const int status = std::system(cmd.c_str());
    std::ifstream in(stdout_file);
    out.assign(std::istreambuf_iterator<char>(in), {});
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // The last run's standard error (a failure's report: a sanitizer's, the CLI's message).
  std::string stderr_text() const {
    std::ifstream in(dir_ / "stderr");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

// A PNG: the signature, then an IHDR chunk; returns its width and height (0, 0 if not).
std::pair<unsigned, unsigned> png_size(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  unsigned char b[24] = {};
  in.read(reinterpret_cast<char*>(b), sizeof b);
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (!in || !std::equal(sig, sig + 8, b) || std::string(b + 12, b + 16) != "IHDR") return {0, 0};
  auto be32 = [&](int at) {
    return (unsigned{b[at]} << 24) | (unsigned{b[at + 1]} << 16) | (unsigned{b[at + 2]} << 8) |
           b[at + 3];
  };
  return {be32(16), be32(20)};
}

// The blocks of a data file (series, in order), each a list of points.
std::vector<points> data_blocks(const fs::path& file) {
  std::ifstream in(file);
  std::vector<points> blocks;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# series ", 0) == 0) {
      blocks.emplace_back();
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    double x = 0, y = 0;
    EXPECT_TRUE(fields >> x >> y) << "bad data line in " << file << ": " << line;
    if (blocks.empty())
      ADD_FAILURE() << "a point before any series in " << file;
    else
      blocks.back().emplace_back(x, y);
  }
  return blocks;
}

void expect_same_points(const points& drawn, const points& reported, const std::string& what) {
  ASSERT_EQ(drawn.size(), reported.size()) << what;
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    for (auto [a, b] : {std::pair{drawn[i].first, reported[i].first},
                        std::pair{drawn[i].second, reported[i].second}}) {
      EXPECT_NEAR(a, b, 1e-9 * std::max(1.0, std::abs(b))) << what << ", point " << i;
    }
  }
}

points json_points(const nlohmann::json& j) {
  points out;
  for (const auto& p : j)
    out.emplace_back(p[0].get<double>(), p[1].get<double>());
  return out;
}

void expect_png(const fs::path& png, unsigned height = 540) {
  const auto [w, h] = png_size(png);
  EXPECT_EQ(w, 960u) << png;
  EXPECT_EQ(h, height) << png;
}

TEST_F(Plots, WriterRefusesBadNamesAndEmptyPlotsAndNamesAMissingGnuplot) {
  plot_spec p;
  p.name = "Bad Name";
  p.series = {{"s", {{1, 2}}, "lines"}};
  EXPECT_THROW(write_plot(dir_, p), std::invalid_argument);
  p.name = "empty";
  p.series = {{"s", {}, "lines"}};
  EXPECT_THROW(write_plot(dir_, p), std::invalid_argument);
  p.logy = true;
  p.series = {{"s", {{1, 0}, {2, -1}}, "lines"}};  // nothing drawable on a log axis
  EXPECT_THROW(write_plot(dir_, p), std::invalid_argument);

  p.name = "nognuplot";
  p.logy = false;
  p.series = {{"s", {{1, 2}, {2, 3}}, "lines"}};
  const char* path = std::getenv("PATH");
  const std::string saved = path ? path : "";
  ::setenv("PATH", dir_.c_str(), 1);
  try {
    write_plot(dir_, p);
    ADD_FAILURE() << "drew a plot without gnuplot on PATH";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gnuplot is not installed"), std::string::npos)
        << e.what();
  }
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_FALSE(fs::exists(dir_ / "nognuplot.png"));
  EXPECT_FALSE(fs::exists(dir_ / "nognuplot.gnuplot.log"));
}

TEST_F(Plots, WriterDrawsEverySeriesFromItsDataFile) {
  plot_spec p;
  p.name = "two-series";
  p.title = "a title with 'quotes'";
  p.logx = true;
  p.series = {{"a", {{1, 1}, {10, 2}, {0, 5}}, "lines"}, {"b", {{2, 3}}, "points"}};
  p.marks = {{5, "mark 'x'"}};
  const written_plot w = write_plot(dir_ / "sub", p);
  expect_png(w.png);
  const auto blocks = data_blocks(w.data);
  ASSERT_EQ(blocks.size(), 2u);
  expect_same_points(blocks[0], {{1, 1}, {10, 2}}, "series a (x = 0 left out on a log axis)");
  expect_same_points(blocks[1], {{2, 3}}, "series b");
  EXPECT_EQ(plot_markdown(w, dir_), "![two-series](sub/two-series.png)\n\n*" + p.caption + "*\n\n");
}

// keygc --compare --plot: the CDF is the JSON's execution times (both phases) sorted, and
// the probe's series is the JSON's probe_series.
TEST_F(Plots, KeygcPlotsTheExecutionsAndProbeItReports) {
  std::string out;
  ASSERT_EQ(run("keygc --compare --keys 3000 --json --plot " + (dir_ / "p").string(), out), 0);
  const auto j = nlohmann::json::parse(out);
  expect_png(dir_ / "p/keygc-executions.png");
  expect_png(dir_ / "p/keygc-probe.png", 2 * 300);  // a panel per collector, 300 px each
  const std::string script = quiesce::test::slurp(dir_ / "p/keygc-probe.gp");
  EXPECT_NE(script.find("set multiplot layout 2,1"), std::string::npos) << script;
  const auto dist = data_blocks(dir_ / "p/keygc-executions.dat");
  const auto probe = data_blocks(dir_ / "p/keygc-probe.dat");
  ASSERT_EQ(dist.size(), 2u);
  ASSERT_EQ(probe.size(), 2u);
  int side_index = 0;
  for (const char* side : {"baseline", "patched"}) {
    std::vector<double> ms;
    for (const char* phase : {"unused", "expired"}) {
      for (const auto& v : j[side]["executions_ms"][phase])
        ms.push_back(v.get<double>());
    }
    EXPECT_EQ(ms.size(), j[side]["combined"]["n"].get<std::size_t>()) << side;
    std::sort(ms.begin(), ms.end());
    const auto& drawn = dist[side_index];
    ASSERT_FALSE(drawn.empty()) << side;
    EXPECT_EQ(drawn.size(), std::min<std::size_t>(ms.size(), 2000)) << side;
    EXPECT_NEAR(drawn.front().first, ms.front(), 1e-9) << side;
    EXPECT_NEAR(drawn.back().first, ms.back(), 1e-9) << side;
    EXPECT_DOUBLE_EQ(drawn.back().second, 1.0) << side;
    for (const auto& [x, y] : drawn) {  // every point is a reported sample at its rank
      const auto rank = static_cast<std::size_t>(std::llround(y * ms.size())) - 1;
      ASSERT_LT(rank, ms.size());
      EXPECT_NEAR(x, ms[rank], 1e-9 * std::max(1.0, ms[rank])) << side;
    }
    points reported;
    for (const auto& p : json_points(j[side]["probe_series"]))
      if (p.second > 0) reported.push_back(p);  // the log axis leaves out zero waits
    expect_same_points(probe[side_index], reported, std::string(side) + " probe series");
    ++side_index;
  }
}

// sweep keygc --plot: the variance plot's medians and runs are the JSON's rows, and the
// mark is on the size the JSON names.
TEST_F(Plots, SweepPlotsItsRowsAndMarksItsChoice) {
  std::string out;
  ASSERT_EQ(run("sweep keygc --keys 2000 --runs 2 --chunks 1 16 256 --json --plot " +
                    (dir_ / "p").string(),
                out),
            0);
  const auto j = nlohmann::json::parse(out);
  expect_png(dir_ / "p/sweep-keygc-variance.png");
  expect_png(dir_ / "p/sweep-keygc-total.png");
  const auto var = data_blocks(dir_ / "p/sweep-keygc-variance.dat");
  const auto total = data_blocks(dir_ / "p/sweep-keygc-total.dat");
  points medians, runs, total_medians;
  for (const auto& r : j["rows"]) {
    const auto x = r["chunk"].get<double>();
    medians.emplace_back(x, r["var_ms2"].get<double>());
    total_medians.emplace_back(x, r["total_ms"].get<double>());
    for (const auto& v : r["var_ms2_runs"])
      runs.emplace_back(x, v.get<double>());
  }
  auto drawable = [](points p) {  // the log axes leave out a zero variance
    std::erase_if(p, [](auto q) { return q.second <= 0; });
    return p;
  };
  ASSERT_EQ(var.size(), 2u);
  expect_same_points(var[0], drawable(medians), "variance medians");
  expect_same_points(var[1], drawable(runs), "variance of each run");
  ASSERT_EQ(total.size(), 2u);
  expect_same_points(total[0], total_medians, "total time medians");
  std::ifstream gp(dir_ / "p/sweep-keygc-variance.gp");
  const std::string script(std::istreambuf_iterator<char>(gp), {});
  const auto lowest = j["lowest_variance_chunk"].get<std::size_t>();
  EXPECT_NE(script.find("from first " + std::to_string(lowest) + ", graph 0"), std::string::npos)
      << script;
}

// sanitize --compare --plot: the progress lines and the attach's wait are the JSON's.
TEST_F(Plots, SanitizePlotsTheTimeLineItReports) {
  std::string out;
  ASSERT_EQ(
      run("sanitize --compare --pages 2000 --seconds 0.2 --json --plot " + (dir_ / "p").string(),
          out),
      0);
  const auto j = nlohmann::json::parse(out);
  expect_png(dir_ / "p/sanitize-boot.png");
  const auto blocks = data_blocks(dir_ / "p/sanitize-boot.dat");
  ASSERT_EQ(blocks.size(), 4u);
  int i = 0;
  for (const char* side : {"baseline", "patched"}) {
    const auto& r = j[side];
    ASSERT_FALSE(r["progress"].empty()) << side;
    expect_same_points(blocks[i], json_points(r["progress"]), std::string(side) + " progress");
    const double at = r["attach_at_ms"].get<double>();
    ASSERT_EQ(blocks[i + 1].size(), 2u) << side;
    EXPECT_NEAR(blocks[i + 1][0].first, at, 1e-9 * std::max(1.0, at)) << side;
    EXPECT_NEAR(blocks[i + 1][1].first, at + r["waiter_ms"].get<double>(), 1e-6) << side;
    i += 2;
  }
}

// verity bench --plot: the CDFs are the JSON's queue_to_start_cdf, the run-delay lines its
// per-run figures.
TEST_F(Plots, VerityBenchPlotsTheLatenciesAndRunDelaysItReports) {
  std::string out;
  ASSERT_EQ(
      run("verity bench --file-mib 4 --seconds 0.2 --runs 2 --json --plot " + (dir_ / "p").string(),
          out),
      0);
  const auto j = nlohmann::json::parse(out);
  expect_png(dir_ / "p/verity-queue-to-start.png");
  expect_png(dir_ / "p/verity-run-delay.png");
  const auto cdf = data_blocks(dir_ / "p/verity-queue-to-start.dat");
  const auto delay = data_blocks(dir_ / "p/verity-run-delay.dat");
  ASSERT_EQ(cdf.size(), 2u);
  ASSERT_EQ(delay.size(), 2u);
  int i = 0;
  for (const char* side : {"unbound", "bound"}) {
    const auto reported = json_points(j[side]["queue_to_start_cdf"]);
    ASSERT_FALSE(reported.empty()) << side;
    EXPECT_DOUBLE_EQ(reported.back().second, 1.0) << side;
    expect_same_points(cdf[i], reported, std::string(side) + " CDF");
    points runs;
    double run = 1;
    for (const auto& v : j["run_delay_ms"][side]["runs"])
      runs.emplace_back(run++, v.get<double>());
    expect_same_points(delay[i], runs, std::string(side) + " run delays");
    ++i;
  }
}

// verity bench --mount --plot: the CDFs are the JSON's queue_to_start_cdf and
// read_latency_cdf of each queue, the per-run lines its run_delay_ms and cold_start_ms runs.
TEST_F(Plots, VerityMountBenchPlotsWhatItReports) {
  if (auto why = verity_mount_bench_unusable()) GTEST_SKIP() << *why;
  std::string out;
  ASSERT_EQ(run("verity bench --mount --app-mib 4 --seq-mib 0 --apps 2 --runs 2 --json --plot " +
                    (dir_ / "p").string(),
                out),
            0);
  const auto j = nlohmann::json::parse(out);
  for (const char* name :
       {"verity-mount-queue-to-start", "verity-mount-read", "verity-mount-per-run"})
    expect_png(dir_ / "p" / (std::string(name) + ".png"));
  const auto queued = data_blocks(dir_ / "p/verity-mount-queue-to-start.dat");
  const auto reads = data_blocks(dir_ / "p/verity-mount-read.dat");
  const auto per_run = data_blocks(dir_ / "p/verity-mount-per-run.dat");
  ASSERT_EQ(queued.size(), 2u);
  ASSERT_EQ(reads.size(), 2u);
  ASSERT_EQ(per_run.size(), 4u);
  const auto runs_of = [](const nlohmann::json& spread) {
    points out;
    double run = 1;
    for (const auto& v : spread["runs"])
      out.emplace_back(run++, v.get<double>());
    return out;
  };
  int i = 0;
  for (const char* side : {"unbound", "bound"}) {
    for (const auto& [drawn, key] :
         {std::pair{&queued, "queue_to_start_cdf"}, std::pair{&reads, "read_latency_cdf"}}) {
      const auto reported = json_points(j[side][key]);
      ASSERT_FALSE(reported.empty()) << side << " " << key;
      EXPECT_DOUBLE_EQ(reported.back().second, 1.0) << side << " " << key;
      expect_same_points((*drawn)[i], reported, std::string(side) + " " + key);
    }
    expect_same_points(per_run[i], runs_of(j[side]["run_delay_ms"]),
                       std::string(side) + " run delays");
    expect_same_points(per_run[2 + i], runs_of(j[side]["cold_start_ms"]),
                       std::string(side) + " cold starts");
    ++i;
  }
}

// The report draws every experiment's plots beside report.md and links each one.
TEST_F(Plots, ReportLinksEveryPlotItDrew) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // No whole report under a sanitizer: the experiments run in process at tiny sizes there
  // (tests/unit/experiments); the report's assembly is checked by the release preset.
  GTEST_SKIP() << "a whole report under a sanitizer (the release preset runs it)";
#endif
  std::string out;
  const fs::path report = dir_ / "report";
  ASSERT_EQ(run("report --smoke --out " + report.string(), out), 0) << stderr_text();
  std::ifstream md_in(report / "report.md");
  const std::string md(std::istreambuf_iterator<char>(md_in), {});
  std::size_t links = 0;
  for (std::size_t at = md.find("]("); at != std::string::npos; at = md.find("](", at + 1)) {
    const std::size_t end = md.find(')', at);
    const std::string target = md.substr(at + 2, end - at - 2);
    if (!target.ends_with(".png")) continue;
    ++links;
    const auto [w, h] = png_size(report / target);
    EXPECT_GT(w, 0u) << target;
    EXPECT_GT(h, 0u) << target;
    EXPECT_TRUE(fs::exists(report / (target.substr(0, target.size() - 4) + ".dat"))) << target;
  }
  for (const char* name :
       {"keygc-executions", "keygc-probe", "sweep-keygc-variance", "sweep-keygc-total",
        "sanitize-boot", "verity-queue-to-start", "verity-run-delay"}) {
    EXPECT_NE(md.find(std::string("(") + name + ".png)"), std::string::npos) << name;
  }
  if (!verity_mount_bench_unusable()) {
    for (const char* name :
         {"verity-mount-queue-to-start", "verity-mount-read", "verity-mount-per-run"}) {
      EXPECT_NE(md.find(std::string("(") + name + ".png)"), std::string::npos) << name;
    }
  }
  EXPECT_GE(links, 7u);

  // The first section: what each patch bought, every verdict the one rule's (recomputed
  // here from results.json's per-run figures).
  const std::size_t summary = md.find("## What each patch bought here");
  EXPECT_NE(summary, std::string::npos);
  EXPECT_LT(summary, md.find("## Seed 000")) << "the summary comes first";
  std::ifstream json_in(report / "results.json");
  const nlohmann::json results = nlohmann::json::parse(json_in);
  ASSERT_TRUE(results.contains("bought")) << results.dump();
  std::set<std::string> seeds;
  for (const nlohmann::json& row : results["bought"]) {
    run_spread before, after;
    before.runs = row["before"]["runs"].get<std::vector<double>>();
    after.runs = row["after"]["runs"].get<std::vector<double>>();
    const better way = row["seed_way"] == "lower" ? better::lower : better::higher;
    EXPECT_EQ(row["verdict"], to_string(judge(before, after, way))) << row.dump();
    EXPECT_NE(md.find(row["metric"].get<std::string>()), std::string::npos) << row["metric"];
    seeds.insert(row["seed"].get<std::string>());
  }
  EXPECT_EQ(seeds, (std::set<std::string>{"000", "003", "004"}));
}

}  // namespace
}  // namespace quiesce::experiments
