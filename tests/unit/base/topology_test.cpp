// SPDX-License-Identifier: Apache-2.0
#include "quiesce/topology.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace quiesce {
namespace {

const std::string fixtures = QUIESCE_TEST_FIXTURES;

std::vector<std::string> strings(const std::vector<cpu_set>& groups) {
  std::vector<std::string> out;
  for (const auto& g : groups)
    out.push_back(g.to_string());
  return out;
}

using v = std::vector<std::string>;

TEST(Topology, SmtCoresSharingOneCache) {
  const auto topo = cpu_topology::read(fixtures + "/sysfs-smt", cpu_set::parse("0-63"));
  EXPECT_EQ(topo.cpus().to_string(), "0-3");
  EXPECT_EQ(strings(topo.groups(affinity_scope::cpu)), (v{"0", "1", "2", "3"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::smt)), (v{"0-1", "2-3"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::cache)), (v{"0-3"}));  // L3, not L1/L2
  EXPECT_EQ(strings(topo.groups(affinity_scope::numa)), (v{"0-3"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::system)), (v{"0-3"}));
  EXPECT_TRUE(topo.fallbacks().empty());
  EXPECT_EQ(topo.group_of(affinity_scope::smt, 3).to_string(), "2-3");
  EXPECT_EQ(topo.node_of(2), 0);
}

TEST(Topology, AffinityMaskRestrictsEveryScope) {
  const auto topo = cpu_topology::read(fixtures + "/sysfs-smt", cpu_set{1, 2});
  EXPECT_EQ(topo.cpus().to_string(), "1-2");
  EXPECT_EQ(strings(topo.groups(affinity_scope::smt)), (v{"1", "2"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::cache)), (v{"1-2"}));
  EXPECT_THROW(topo.group_of(affinity_scope::smt, 0), std::invalid_argument);
  EXPECT_THROW(topo.node_of(3), std::invalid_argument);
}

TEST(Topology, TwoNodesWithAnOfflineCpuAndOlderSiblingFiles) {
  const auto topo = cpu_topology::read(fixtures + "/sysfs-numa", cpu_set::parse("0-63"));
  EXPECT_EQ(topo.cpus().to_string(), "0-6");  // cpu7 is offline
  EXPECT_EQ(strings(topo.groups(affinity_scope::smt)), (v{"0", "1", "2", "3", "4", "5", "6"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::cache)), (v{"0-3", "4-6"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::numa)), (v{"0-3", "4-6"}));
  EXPECT_EQ(topo.node_of(5), 1);
  EXPECT_EQ(topo.node_of(0), 0);
  EXPECT_TRUE(topo.fallbacks().empty());
}

TEST(Topology, MissingFilesFallBackAndSayWhich) {
  const auto topo = cpu_topology::read(fixtures + "/sysfs-minimal", cpu_set::parse("0-63"));
  EXPECT_EQ(topo.cpus().to_string(), "0-1");
  EXPECT_EQ(strings(topo.groups(affinity_scope::smt)), (v{"0", "1"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::numa)), (v{"0-1"}));
  EXPECT_EQ(strings(topo.groups(affinity_scope::cache)), (v{"0-1"}));
  EXPECT_EQ(topo.fallbacks().size(), 3u);  // node/, topology, cache
}

TEST(Topology, NoSysfsAtAllUsesTheAffinityMask) {
  const auto topo = cpu_topology::read(fixtures + "/does-not-exist", cpu_set{0, 2, 5});
  EXPECT_EQ(topo.cpus().to_string(), "0,2,5");
  EXPECT_EQ(strings(topo.groups(affinity_scope::cache)), (v{"0,2,5"}));
  EXPECT_EQ(topo.fallbacks().size(), 4u);
}

TEST(Topology, NoUsableCpuIsAnError) {
  EXPECT_THROW(cpu_topology::read(fixtures + "/sysfs-smt", cpu_set{9}), std::invalid_argument);
}

TEST(Topology, EveryUsableCpuIsInExactlyOneGroupOfEachScopeOnThisMachine) {
  const cpu_topology& topo = system_topology();
  EXPECT_FALSE(topo.cpus().empty());
  for (auto scope : {affinity_scope::cpu, affinity_scope::smt, affinity_scope::cache,
                     affinity_scope::numa, affinity_scope::system}) {
    for (int cpu : topo.cpus()) {
      int holders = 0;
      for (const auto& g : topo.groups(scope))
        holders += g.contains(cpu);
      EXPECT_EQ(holders, 1) << "cpu " << cpu << " scope " << to_string(scope);
    }
  }
}

}  // namespace
}  // namespace quiesce
