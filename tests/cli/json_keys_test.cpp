// SPDX-License-Identifier: Apache-2.0
// The experiments' JSON after the move to typed results: every key scripts read before is
// still there with its type (results.json and `--json` are read by scripts), and the
// headline figures agree with the numbers beside them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json run_json(const std::string& args) {
  const fs::path out = fs::temp_directory_path() / ("quiesce-json-" + std::to_string(::getpid()));
  const std::string cmd =
      std::string(QUIESCE_CLI) + " " + args + " --json >" + out.string() + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;
  std::ifstream in(out);
  json j = json::parse(in);
  fs::remove(out);
  return j;
}

// `path` is "a/b/c"; each key must exist and the leaf be a number (or `kind`).
void expect_key(const json& j, const std::string& path,
                json::value_t kind = json::value_t::number_float) {
  const json* at = &j;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = path.find('/', start);
    const std::string key = path.substr(start, slash - start);
    ASSERT_TRUE(at->is_object() && at->contains(key)) << "missing " << path;
    at = &(*at)[key];
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (kind == json::value_t::number_float) {
    EXPECT_TRUE(at->is_number()) << path << " is " << at->type_name();
  } else {
    EXPECT_EQ(at->type(), kind) << path << " is " << at->type_name();
  }
}

double drop(double before, double after) {
  return before == 0 ? 0 : (before - after) / before * 100;
}

TEST(ExperimentJson, KeygcCompareKeepsItsKeys) {
  const json j = run_json("keygc --compare --keys 2000");
  for (const char* k : {"variance_drop_pct", "total_time_increase_pct", "probe_max_drop_pct"})
    expect_key(j, k);
  for (const std::string side : {"baseline", "patched"}) {
    expect_key(j, side + "/mode", json::value_t::string);
    expect_key(j, side + "/probe_policy", json::value_t::string);
    for (const char* k : {"chunk", "keys", "runs", "total_ms", "executions", "hog_reports",
                          "probe/n", "probe/p50_us", "probe/p99_us", "probe/max_us"})
      expect_key(j, side + "/" + k);
    for (const char* phase : {"unused", "expired", "combined"})
      for (const char* k : {"n", "min_ms", "avg_ms", "max_ms", "var_ms2"})
        expect_key(j, side + "/" + phase + "/" + k);
    for (const char* phase : {"unused_latency", "expired_latency"})
      for (const char* k : {"probe/collector_cpu", "probe/on_collector_cpu/max_ms",
                            "probe/other_cpus/max_ms", "probe/overruns", "reclaim/avg_ms"})
        expect_key(j, side + "/" + phase + "/" + k);
  }
  EXPECT_NEAR(j["variance_drop_pct"].get<double>(),
              drop(j["baseline"]["combined"]["var_ms2"].get<double>(),
                   j["patched"]["combined"]["var_ms2"].get<double>()),
              1e-6);
  EXPECT_NEAR(
      j["total_time_increase_pct"].get<double>(),
      -drop(j["baseline"]["total_ms"].get<double>(), j["patched"]["total_ms"].get<double>()), 1e-6);
}

// --also: a third collector runs in every pair and is pooled like the two; the pair's
// figures stay the baseline's and the patched collector's.
TEST(ExperimentJson, KeygcCompareAlsoRunsAThirdCollectorInEveryPair) {
  const json j = run_json("keygc --compare --also budget --keys 2000 --runs 2");
  ASSERT_TRUE(j.contains("also")) << j.dump();
  EXPECT_EQ(j["also"]["mode"], "budget");
  for (const char* side : {"baseline", "patched", "also"}) {
    EXPECT_EQ(j[side]["runs"].get<int>(), 2) << side;
    EXPECT_GT(j[side]["executions"].get<double>(), 0) << side;
    expect_key(j, std::string(side) + "/combined/var_ms2");
  }
  EXPECT_EQ(j["per_run"].size(), 2u);
  EXPECT_NEAR(j["variance_drop_pct"].get<double>(),
              drop(j["baseline"]["combined"]["var_ms2"].get<double>(),
                   j["patched"]["combined"]["var_ms2"].get<double>()),
              1e-6);
  EXPECT_FALSE(run_json("keygc --compare --keys 2000").contains("also"));
}

TEST(ExperimentJson, SweepKeepsItsKeys) {
  const json j = run_json("sweep keygc --keys 1000 --runs 2 --chunks 1 64");
  for (const char* k : {"keys", "runs", "within_pct", "chosen_chunk", "lowest_variance_chunk"})
    expect_key(j, k);
  expect_key(j, "fitness", json::value_t::string);
  expect_key(j, "separable", json::value_t::boolean);
  expect_key(j, "candidates", json::value_t::array);
  expect_key(j, "overlapping", json::value_t::array);
  ASSERT_EQ(j["rows"].size(), 2u);
  for (const auto& r : j["rows"]) {
    for (const char* k : {"chunk", "var_ms2", "var_ms2_min", "var_ms2_max", "total_ms"})
      expect_key(r, k);
    ASSERT_EQ(r["var_ms2_runs"].size(), 2u);
    ASSERT_EQ(r["total_ms_runs"].size(), 2u);
  }
}

TEST(ExperimentJson, SanitizeCompareKeepsItsKeys) {
  const json j = run_json("sanitize --compare --pages 2000 --seconds 0.2");
  for (const char* k : {"waiter_drop_pct", "boot_drop_pct", "sanitize_slowdown_pct"})
    expect_key(j, k);
  for (const std::string side : {"baseline", "patched"}) {
    expect_key(j, side + "/qs", json::value_t::string);
    for (const char* k :
         {"waiter_ms", "boot_ms", "sanitize_ms", "pages", "pages_per_s", "stall_reports"})
      expect_key(j, side + "/" + k);
  }
  EXPECT_EQ(j["baseline"]["qs"], "resched");
  EXPECT_EQ(j["patched"]["qs"], "tasks-qs");
  EXPECT_NEAR(
      j["waiter_drop_pct"].get<double>(),
      drop(j["baseline"]["waiter_ms"].get<double>(), j["patched"]["waiter_ms"].get<double>()),
      1e-6);
}

TEST(ExperimentJson, VerityBenchKeepsItsKeys) {
  const json j = run_json("verity bench --file-mib 4 --seconds 0.2 --runs 2");
  for (const char* k : {"file_mib", "readers", "seconds", "read_kib", "runs", "run_delay_drop_pct",
                        "sched_latency_drop_pct", "sched_latency_p99_drop_pct", "read_p99_drop_pct",
                        "run_delay_drop_pct_spread/median", "sched_latency_drop_pct_spread/max"})
    expect_key(j, k);
  for (const std::string side : {"unbound", "bound"}) {
    expect_key(j, side + "/queue", json::value_t::string);
    for (const char* k : {"queue_to_start_us/p50", "queue_to_start_us/p99", "queue_to_start_us/max",
                          "queue_to_start_us/total", "run_delay_ms", "read_latency_us/p50",
                          "read_latency_us/p99", "read_latency_us/max", "reads", "mib_per_s"})
      expect_key(j, side + "/" + k);
    for (const char* k : {"median", "min", "max"})
      expect_key(j, "run_delay_ms/" + side + "/" + k);
    EXPECT_EQ(j["run_delay_ms"][side]["runs"].size(), 2u);
  }
}

}  // namespace
