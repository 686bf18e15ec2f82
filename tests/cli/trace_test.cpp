// SPDX-License-Identifier: Apache-2.0
// What an experiment's --trace FILE carries beyond its structure (cli_test.cpp checks that):
// the pool and CPU of every execution, the work-item probe's wait as a counter track, and
// the watchdog's reports as instant events on the timeline.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

class Traces : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiesce-traces-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the CLI with --json and --trace; returns the JSON it printed and the trace.
  std::pair<nlohmann::json, nlohmann::json> run(const std::string& args) {
    const fs::path out = dir_ / "stdout", trace = dir_ / "trace.json";
    const std::string cmd = std::string(QUIESCE_CLI) + " " + args + " --json --trace " +
                            trace.string() + " >" + out.string() + " 2>/dev/null";
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;
    std::ifstream o(out), t(trace);
    return {nlohmann::json::parse(o), nlohmann::json::parse(t)};
  }

  fs::path dir_;
};

TEST_F(Traces, ExecutionsNameTheirPoolAndCpuAndTheProbeIsACounter) {
  const auto [result, trace] = run("keygc --compare --keys 3000");
  const long cpus = ::sysconf(_SC_NPROCESSORS_CONF);
  std::size_t executions = 0, counters = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("name") == "workqueue_execute_start") {
      ++executions;
      ASSERT_TRUE(e.contains("args")) << e.dump();
      EXPECT_TRUE(e["args"].at("pool").is_number_unsigned()) << e.dump();
      EXPECT_LT(e["args"].at("cpu").get<long>(), cpus) << e.dump();
      EXPECT_TRUE(e["args"].at("function").is_string()) << e.dump();
    }
    if (e.at("name") == "keygc probe: queue->start (us)") {
      ++counters;
      EXPECT_EQ(e.at("ph"), "C");
      EXPECT_TRUE(e.at("args").at("us").is_number()) << e.dump();
    }
  }
  EXPECT_GT(executions, 0u);
  // One counter value per probe item that ran while measuring, in both collectors' runs.
  // Each thread's ring keeps its newest 16384 events: on a loaded machine the run lasts
  // longer, the probe's worker overflows its ring, and the trace says how many it lost.
  const std::size_t probes = result["baseline"]["probe"]["n"].get<std::size_t>() +
                             result["patched"]["probe"]["n"].get<std::size_t>();
  const auto lost = trace.at("otherData").at("overwritten_events").get<std::size_t>();
  if (lost == 0) {
    EXPECT_EQ(counters, probes);
  } else {
    EXPECT_LE(counters, probes);
    EXPECT_GE(counters + lost, probes) << lost << " overwritten";
  }
}

TEST_F(Traces, StallReportsAreInstantsOnTheTimeline) {
  // cond_resched() holds the attach's Tasks grace period for the whole loop (~1.5 s), far
  // past the 250 ms first report: the baseline reports at least once.
  const auto [result, trace] = run("sanitize --compare --pages 4000 --seconds 1.5");
  std::size_t reports = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("name") != "console") continue;
    EXPECT_EQ(e.at("ph"), "i");
    const std::string msg = e.at("args").at("msg");
    if (msg.find("rcu_tasks_wait_gp:") != std::string::npos ||
        msg.find("detected stalls on threads") != std::string::npos ||
        msg.find("blocked for more than") != std::string::npos) {
      ++reports;
    }
  }
  EXPECT_GE(result["baseline"]["stall_reports"].get<std::size_t>(), 1u);
  EXPECT_EQ(reports, result["baseline"]["stall_reports"].get<std::size_t>() +
                         result["patched"]["stall_reports"].get<std::size_t>());
}

}  // namespace
