// SPDX-License-Identifier: Apache-2.0
#include "quiesce/cpu_set.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace quiesce {
namespace {

TEST(CpuSet, ParsesTheKernelCpulistFormat) {
  EXPECT_EQ(cpu_set::parse("0-3,8,10-11\n").cpus(), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(cpu_set::parse("5").cpus(), std::vector<int>{5});
  EXPECT_TRUE(cpu_set::parse("").empty());
  EXPECT_TRUE(cpu_set::parse("\n").empty());
  EXPECT_EQ(cpu_set::parse("3,1,1-2").cpus(), (std::vector<int>{1, 2, 3}));
}

TEST(CpuSet, FormatsAsCpulistAndRoundTrips) {
  EXPECT_EQ(cpu_set({0, 1, 2, 3, 8, 10, 11}).to_string(), "0-3,8,10-11");
  EXPECT_EQ(cpu_set({}).to_string(), "");
  EXPECT_EQ(cpu_set({7}).to_string(), "7");
  for (const char* text : {"0", "0-1", "1,3,5", "0-2,4-6,1000-1023"}) {
    EXPECT_EQ(cpu_set::parse(text).to_string(), text);
  }
}

TEST(CpuSet, RejectsMalformedTextNamingIt) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1,", "0-2048", "1 2", "1;2"}) {
    try {
      cpu_set::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(cpu_set{}.insert(-1), std::invalid_argument);
  EXPECT_THROW(cpu_set{}.insert(CPU_SETSIZE), std::invalid_argument);
}

TEST(CpuSet, NativeRoundTripAndIntersection) {
  const cpu_set s{0, 2, 63, 64, 1023};
  EXPECT_EQ(cpu_set::from_native(s.to_native()), s);
  EXPECT_EQ(s.intersect(cpu_set{2, 3, 64}), (cpu_set{2, 64}));
  EXPECT_TRUE(s.contains(63));
  EXPECT_FALSE(s.contains(1));
  EXPECT_EQ(s.first(), 0);
  EXPECT_EQ(cpu_set{}.first(), -1);
}

TEST(CpuSet, CurrentAffinityIsNotEmpty) {
  const cpu_set mine = cpu_set::current_affinity();
  EXPECT_FALSE(mine.empty());
  EXPECT_TRUE(mine.contains(sched_getcpu()));
}

}  // namespace
}  // namespace quiesce
