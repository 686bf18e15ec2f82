// SPDX-License-Identifier: Apache-2.0
// The experiment table (table.hpp) and each experiment run in process at a tiny size,
// checked through its typed result (tests/cli runs them through the CLI, at report size).
#include "quiesce/experiments/table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "quiesce/experiments/keygc_compare.hpp"
#include "quiesce/experiments/machine.hpp"
#include "quiesce/experiments/sanitize_boot.hpp"
#include "quiesce/experiments/sweep.hpp"
#include "quiesce/experiments/verity_bench.hpp"

namespace quiesce::experiments {
namespace {

TEST(ExperimentTable, ListsEachExperimentOnceInSeedOrder) {
  std::set<std::string_view> names;
  std::string_view last_seed = "000";
  std::set<std::string_view> seeds;
  for (const experiment& e : all_experiments()) {
    EXPECT_TRUE(names.insert(e.name).second) << "two rows named " << e.name;
    EXPECT_FALSE(e.title.empty()) << e.name;
    EXPECT_NE(e.run, nullptr) << e.name;
    EXPECT_TRUE(e.seed == "000" || e.seed == "003" || e.seed == "004" || e.seed.empty())
        << e.name << ": seed " << e.seed;
    // Seed by seed, then the runtime's rows (no seed) last.
    if (!last_seed.empty()) {
      EXPECT_TRUE(e.seed.empty() || e.seed >= last_seed) << e.name << " is out of seed order";
    } else {
      EXPECT_TRUE(e.seed.empty()) << e.name << " follows a row without a seed";
    }
    last_seed = e.seed;
    seeds.insert(e.seed);
  }
  for (std::string_view s : {"000", "003", "004"})
    EXPECT_TRUE(seeds.count(s)) << "no experiment for seed " << s;
  for (std::string_view n :
       {"keygc", "sweep keygc", "sanitize", "verity bench", "verity bench --mount", "bench peers"})
    EXPECT_TRUE(names.count(n)) << "no row " << n;
}

const experiment& row(std::string_view name) {
  const auto all = all_experiments();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const experiment& e) { return e.name == name; });
  if (it == all.end()) throw std::logic_error("no row " + std::string(name));
  return *it;
}

// A row run through the table at the report's smoke size renders its typed result.
TEST(ExperimentTable, SmokeRowsRenderTheirResult) {
  const experiment_options smoke{.quick = false, .smoke = true, .set_gc_delay = {}};
  for (std::string_view name : {"sweep keygc", "sanitize"}) {
    const experiment_output out = row(name).run(smoke);
    EXPECT_TRUE(out.skipped.empty()) << name << ": " << out.skipped;
    EXPECT_TRUE(out.json.is_object()) << name;
    EXPECT_FALSE(out.markdown.empty()) << name;
    EXPECT_FALSE(out.plots.empty()) << name;
  }
  EXPECT_FALSE(row("sanitize").run(smoke).bought.empty());
  EXPECT_TRUE(row("sweep keygc").run(smoke).bought.empty());  // a study, not a before/after
  const experiment_output sweep = row("sweep keygc").run(smoke);
  EXPECT_EQ(sweep.json["rows"].size(), 3u) << sweep.json.dump();  // chunks 1, 32 and 1024
}

TEST(Experiments, KeygcComparisonAtATinySize) {
  keygc_config c;
  c.keys = 640;
  c.per_keyring = 64;
  c.timeout_ms = 50;
  keygc_config base = c;
  base.mode = keys::gc_mode::monolithic;
  const keygc_comparison_result r = run_keygc_comparison(base, c, 1);
  ASSERT_EQ(r.per_run.size(), 1u);
  EXPECT_EQ(r.baseline.config.mode, keys::gc_mode::monolithic);
  EXPECT_EQ(r.patched.config.mode, keys::gc_mode::chunked);
  EXPECT_FALSE(r.also.has_value());
  EXPECT_FALSE(r.kernel.has_value());
  // Chunks of 64 over 640 keys (and their keyrings) take more executions than one pass.
  EXPECT_GT(r.baseline.executions, 0u);
  EXPECT_GT(r.patched.executions, r.baseline.executions);
  EXPECT_EQ(r.to_json()["patched"]["executions"], r.patched.executions) << r.to_json().dump();
  // The seed's figures, one value per pair of runs on each side.
  const std::vector<bought_row> bought = r.bought();
  ASSERT_EQ(bought.size(), 2u);
  EXPECT_EQ(bought[0].seed, "000");
  EXPECT_EQ(bought[0].before.runs.size(), 1u);
  EXPECT_EQ(bought[0].after.runs.size(), 1u);
  EXPECT_DOUBLE_EQ(bought[1].before.median(), r.baseline.total_ms());

  // A kernel column whose expired phase was skipped sums one phase beside quiesce's two:
  // its combined and total cells say so.
  keygc_comparison_result with_kernel = r;
  kernel_keygc_result k;
  k.kernel = "test";
  k.unused.exec_ns.add(1e6);
  k.expired.skipped = "gc_delay not writable";
  with_kernel.kernel = k;
  const std::string md = with_kernel.markdown();
  EXPECT_NE(md.find("| total task time, ms | 1.0 (unused phase only) |"), std::string::npos) << md;
  EXPECT_EQ(r.markdown().find("phase only"), std::string::npos);
}

TEST(Experiments, SweepAtATinySize) {
  sweep_config c;
  c.chunks = {1, 64};
  c.runs = 1;
  c.keys = 300;
  const sweep_result r = run_sweep(c);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].chunk, 1u);
  EXPECT_EQ(r.rows[1].chunk, 64u);
  EXPECT_EQ(r.rows[0].total_ms.size(), 1u);
  EXPECT_TRUE(r.choice.chunk == 1 || r.choice.chunk == 64) << r.choice.chunk;
}

TEST(Experiments, SanitizeComparisonAtATinySize) {
  boot_options b;
  b.sanitizer.pages = 256;
  b.sanitizer.passes = 1;
  b.sanitizer.policy = sanitize::qs_policy::resched;
  const sanitize_comparison_result r = run_sanitize_comparison(b, 1);
  ASSERT_EQ(r.baseline_runs.size(), 1u);
  ASSERT_EQ(r.patched_runs.size(), 1u);
  EXPECT_EQ(r.baseline().policy, sanitize::qs_policy::resched);
  EXPECT_EQ(r.patched().policy, sanitize::qs_policy::tasks_qs);
  // Every page once, plus the second pass over those left dirty (fail_share).
  EXPECT_GE(r.baseline().pages, 256u);
  EXPECT_LT(r.baseline().pages, 2 * 256u);
  EXPECT_GT(r.patched().waiter_ms, 0);
  const std::vector<bought_row> bought = r.bought();
  ASSERT_EQ(bought.size(), 2u);
  EXPECT_EQ(bought[0].seed, "003");
  EXPECT_EQ(bought[0].before.runs, std::vector<double>{r.baseline().waiter_ms});
  EXPECT_EQ(bought[0].after.runs, std::vector<double>{r.patched().waiter_ms});
}

TEST(Experiments, VerityBenchAtATinySize) {
  verity_bench_config c;
  c.file_mib = 1;
  c.seconds = 0.05;
  c.runs = 1;
  const verity_bench_result r = run_verity_bench(c);
  EXPECT_EQ(r.bound.queue.empty(), false);
  EXPECT_GT(r.bound.bytes, 0u);
  EXPECT_GT(r.unbound.bytes, 0u);
  EXPECT_GT(r.bound.read_ns.count(), 0u);
  const std::vector<bought_row> bought = r.bought();
  ASSERT_EQ(bought.size(), 1u);
  EXPECT_EQ(bought[0].before.runs, r.unbound_delay_ms.runs);  // the bug: unbound
  EXPECT_EQ(bought[0].after.runs, r.bound_delay_ms.runs);
}

TEST(Experiments, MachineFactsAreTyped) {
  const machine_facts m = measure_machine();
  EXPECT_FALSE(m.cpus.empty());
  EXPECT_FALSE(m.cache_groups.empty());
  EXPECT_GT(m.clock_monotonic_ns, 0);
  const auto& rows = m.sha256.rows;
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [&](const auto& r) {
    return r.name == m.sha256.chosen;
  })) << m.sha256.chosen;
  EXPECT_EQ(m.to_json()["cpus"], m.cpus);
  EXPECT_NE(m.markdown().find("usable CPUs: " + m.cpus), std::string::npos) << m.markdown();
}

}  // namespace
}  // namespace quiesce::experiments
