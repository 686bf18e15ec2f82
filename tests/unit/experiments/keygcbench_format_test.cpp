// SPDX-License-Identifier: Apache-2.0
// The experiments' figures as the seed patches print them (keygcbench_format.hpp).
#include "quiesce/experiments/keygcbench_format.hpp"

#include <gtest/gtest.h>

namespace quiesce::experiments {
namespace {

TEST(KeygcbenchFormat, LineInMilliseconds) {
  summary ns;
  ns.add(1'000'000);  // 1 ms
  ns.add(3'000'000);  // 3 ms
  EXPECT_EQ(keygcbench_line("unused", ns), "unused:   min=1.000 avg=2.000 max=3.000 var=1.000");
  EXPECT_EQ(keygcbench_line("combined", ns), "combined: min=1.000 avg=2.000 max=3.000 var=1.000");
  summary seedlike;
  seedlike.add(5'000);       // 0.005 ms
  seedlike.add(79'591'000);  // 79.591 ms
  EXPECT_EQ(keygcbench_line("x", seedlike, 0), "x:min=0.005 avg=39.798 max=79.591 var=1583.483");
}

TEST(KeygcbenchFormat, DropPct) {
  EXPECT_DOUBLE_EQ(drop_pct(200, 14), 93.0);  // the seed's "variance -93%"
  EXPECT_DOUBLE_EQ(drop_pct(100, 102.2), -2.2000000000000028);
  EXPECT_DOUBLE_EQ(drop_pct(0, 5), 0.0);
}

}  // namespace
}  // namespace quiesce::experiments
