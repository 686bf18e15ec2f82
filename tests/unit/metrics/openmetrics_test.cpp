// SPDX-License-Identifier: Apache-2.0
// write_openmetrics: the scrape parsed by prometheus_client's strict OpenMetrics parser
// (tests/unit/metrics/parse_openmetrics.py), and its values checked against the stats the
// runtime reports; all_workqueue_stats lists exactly the queues alive.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "quiesce/log.hpp"
#include "quiesce/metrics.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/workqueue.hpp"
#include "wait.hpp"

namespace quiesce {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::string out;
  std::array<char, 4096> buf{};
  while (const std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get()))
    out.append(buf.data(), n);
  const int status = ::pclose(pipe.release());
  if (status != 0) throw std::runtime_error("failed (" + std::to_string(status) + "): " + command);
  return out;
}

// The scrape, as the strict parser reads it.
nlohmann::json parsed(const std::string& text) {
  const fs::path file = fs::temp_directory_path() / ("openmetrics_" + std::to_string(::getpid()));
  std::ofstream(file) << text;
  const std::string json = run("/usr/bin/python3 " QUIESCE_METRICS_PARSER " " + file.string());
  fs::remove(file);
  return nlohmann::json::parse(json);
}

std::string scrape() {
  std::ostringstream out;
  write_openmetrics(out);
  return out.str();
}

const nlohmann::json* sample(const nlohmann::json& families, const std::string& family,
                             const std::string& name, const nlohmann::json& labels) {
  if (!families.contains(family)) return nullptr;
  for (const auto& s : families[family]["samples"]) {
    bool match = s["name"] == name;
    for (const auto& [k, v] : labels.items())
      match = match && s["labels"].value(k, "") == v;
    if (match) return &s;
  }
  return nullptr;
}

TEST(OpenMetrics, AStrictParserAcceptsTheScrapeAndItsValuesAreTheStats) {
  // A name that needs escaping in a label value.
  const std::string name = "metrics \"q\"\\x\nnext";
  workqueue wq(name, wq_options{.unbound = true});
  log_capture capture;  // the throwing item's report
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(wq.post([] {}));
  ASSERT_TRUE(wq.post([] { throw std::runtime_error("counted"); }));
  wq.flush();
  // A queue whose one slot a running item holds: 16 queueings behind it make one backlog
  // yield, whatever this thread counted before (one per 16 saturated queueings).
  workqueue saturated("metrics saturated", wq_options{.ordered = true});
  {
    test::gate release, started;
    EXPECT_TRUE(saturated.post([&] {
      started.open();
      (void)release.wait();
    }));
    EXPECT_TRUE(started.wait());
    for (int i = 0; i < 16; ++i)
      EXPECT_TRUE(saturated.post([] {}));
    release.open();
    saturated.flush();
  }
  const wq_stats saturated_stats = saturated.stats();
  ASSERT_EQ(saturated_stats.backlog_yields, 1u);
  rcu_synchronize(rcu_default_domain());
  const wq_stats stats = wq.stats();
  const std::string text = scrape();
  ASSERT_EQ(text.substr(text.size() - 6), "# EOF\n");
  EXPECT_NE(text.find("workqueue=\"metrics \\\"q\\\"\\\\x\\nnext\""), std::string::npos) << text;

  const nlohmann::json families = parsed(text);
  const nlohmann::json q = {{"workqueue", name}, {"kind", "unbound"}};
  for (const char* family :
       {"quiesce_workqueue_queued", "quiesce_workqueue_executed", "quiesce_workqueue_exceptions"}) {
    ASSERT_TRUE(families.contains(family)) << family;
    EXPECT_EQ(families[family]["type"], "counter") << family;
  }
  const auto value = [&](const char* family, const std::string& sample_name,
                         const nlohmann::json& labels) {
    const nlohmann::json* s = sample(families, family, sample_name, labels);
    if (s == nullptr) {
      ADD_FAILURE() << "no " << sample_name << " " << labels.dump();
      return -1.0;
    }
    return (*s)["value"].get<double>();
  };
  EXPECT_EQ(value("quiesce_workqueue_queued", "quiesce_workqueue_queued_total", q), 11);
  EXPECT_EQ(value("quiesce_workqueue_executed", "quiesce_workqueue_executed_total", q), 11);
  EXPECT_EQ(value("quiesce_workqueue_exceptions", "quiesce_workqueue_exceptions_total", q), 1);
  EXPECT_EQ(value("quiesce_workqueue_in_flight", "quiesce_workqueue_in_flight", q), 0);
  EXPECT_EQ(value("quiesce_workqueue_backlog_yields", "quiesce_workqueue_backlog_yields_total", q),
            static_cast<double>(stats.backlog_yields));
  EXPECT_EQ(value("quiesce_workqueue_backlog_yields", "quiesce_workqueue_backlog_yields_total",
                  {{"workqueue", "metrics saturated"}}),
            1);
  // The histogram: +Inf and _count are every start; _sum is their total in seconds.
  nlohmann::json inf = q;
  inf["le"] = "+Inf";
  EXPECT_EQ(value("quiesce_workqueue_queue_to_start_seconds",
                  "quiesce_workqueue_queue_to_start_seconds_bucket", inf),
            11);
  EXPECT_EQ(value("quiesce_workqueue_queue_to_start_seconds",
                  "quiesce_workqueue_queue_to_start_seconds_count", q),
            static_cast<double>(stats.queue_to_start_ns.count()));
  EXPECT_NEAR(value("quiesce_workqueue_run_seconds", "quiesce_workqueue_run_seconds_sum", q),
              stats.run_ns.mean() * static_cast<double>(stats.run_ns.count()) / 1e9, 1e-9);
  EXPECT_EQ(families["quiesce_workqueue_run_seconds"]["type"], "histogram");
  // Pools, posted items' memory, the watchdog and every RCU domain are there.
  EXPECT_TRUE(families.contains("quiesce_pool_workers"));
  EXPECT_GT(get_posted_memory().slab_bytes, 0u);  // the posts above took a slab
  EXPECT_EQ(
      value("quiesce_posted_memory_bytes", "quiesce_posted_memory_bytes", nlohmann::json::object()),
      static_cast<double>(get_posted_memory().slab_bytes));
  EXPECT_TRUE(families.contains("quiesce_watchdog_wq_lockups"));
  EXPECT_GE(value("quiesce_rcu_grace_periods", "quiesce_rcu_grace_periods_total",
                  {{"domain", rcu_default_domain().name()}}),
            1);
  for (rcu_domain* d : {&rcu_default_domain(), &rcu_qsbr_domain(), &rcu_tasks_domain()}) {
    EXPECT_NE(sample(families, "quiesce_rcu_callbacks_pending", "quiesce_rcu_callbacks_pending",
                     {{"domain", d->name()}}),
              nullptr)
        << d->name();
  }
}

// A latency exactly at a bucket bound, and one just past it, land on the right sides.
TEST(OpenMetrics, BucketsAreCumulativeAndCountWholeBucketsOnly) {
  workqueue wq("metrics_buckets");
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(wq.post([] {}));
  wq.flush();
  const nlohmann::json families = parsed(scrape());
  double last = 0;
  int buckets = 0;
  for (const auto& s : families["quiesce_workqueue_run_seconds"]["samples"]) {
    if (s["labels"].value("workqueue", "") != "metrics_buckets" ||
        s["name"] != "quiesce_workqueue_run_seconds_bucket") {
      continue;
    }
    EXPECT_GE(s["value"].get<double>(), last);
    last = s["value"].get<double>();
    ++buckets;
  }
  EXPECT_EQ(buckets, 23);  // 22 bounds and +Inf
  EXPECT_EQ(last, 3);
}

// The parser is strict: text that breaks the format is refused (so the test above can fail).
TEST(OpenMetrics, TheParserRefusesBrokenText) {
  EXPECT_THROW(parsed("# TYPE a counter\na_total 1\n"), std::runtime_error);   // no # EOF
  EXPECT_THROW(parsed("# TYPE a counter\na 1\n# EOF\n"), std::runtime_error);  // no _total
  EXPECT_THROW(parsed("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                      "h_count 1\nh_sum 1\n# EOF\n"),
               std::runtime_error);  // not cumulative
  EXPECT_NO_THROW(parsed("# TYPE a counter\na_total 1\n# EOF\n"));
}

TEST(OpenMetrics, ListsTheQueuesAliveAndOnlyThose) {
  const auto names = [] {
    std::vector<std::string> out;
    for (const wq_stats& s : all_workqueue_stats())
      out.push_back(s.name);
    return out;
  };
  const auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  {
    workqueue a("alive_a");
    EXPECT_TRUE(has(names(), "alive_a"));
  }
  EXPECT_FALSE(has(names(), "alive_a"));
  system_wq();
  EXPECT_TRUE(has(names(), "events"));
}

}  // namespace
}  // namespace quiesce
