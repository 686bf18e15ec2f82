// SPDX-License-Identifier: Apache-2.0
// peers.hpp: a row's goal - a ratio to the best peer, or a ceiling on every repetition of
// quiesce whatever the peers do - and what the table says about it.
#include <gtest/gtest.h>

#include "quiesce/experiments/peers.hpp"

namespace quiesce::experiments {
namespace {

peer_row row(better way, std::vector<double> ours, std::vector<double> theirs, row_goal goal) {
  return {.metric = "m",
          .unit = "us",
          .direction = way,
          .ours = {.runtime = "quiesce", .values = std::move(ours)},
          .peers = {{.runtime = "peer", .values = std::move(theirs)}},
          .goal = std::move(goal)};
}

row_goal at_least(double ratio) {
  row_goal g;
  g.ratio = ratio;
  return g;
}

TEST(PeersGoal, ARatioGoalComparesMediansWithTheBestPeer) {
  // Lower is better: ratio theirs / ours = 10 / 1 = 10.
  EXPECT_TRUE(row(better::lower, {1, 1, 5}, {10, 10, 10}, at_least(10)).meets_goal());
  EXPECT_FALSE(row(better::lower, {1.1, 1.1, 1}, {10, 10, 10}, at_least(10)).meets_goal());
  EXPECT_TRUE(row(better::higher, {2, 2, 0}, {2, 2, 9}, at_least(1)).meets_goal());  // 1.00x is met
  EXPECT_FALSE(row(better::higher, {1.9, 1.9, 9}, {2, 2, 2}, at_least(1)).meets_goal());
  EXPECT_EQ(at_least(10).text(), ">= 10x");
}

TEST(PeersGoal, ACeilingHoldsForEveryRepetitionWhateverThePeersDo) {
  const row_goal cap{.ratio = 1, .at_most = 1048.576, .why = "the limit"};
  // Worse than the peer, but under the ceiling: met.
  EXPECT_TRUE(row(better::lower, {1048, 1048.576, 900}, {10, 10, 10}, cap).meets_goal());
  // One repetition over it: not met, however good the median.
  EXPECT_FALSE(row(better::lower, {1, 1, 1049}, {2000, 2000, 2000}, cap).meets_goal());
  // Nothing measured is not a bound kept.
  EXPECT_FALSE(row(better::lower, {}, {10}, cap).meets_goal());
  EXPECT_EQ(cap.text(), "<= 1049 (the limit)");  // as the table prints 1048.576
}

}  // namespace
}  // namespace quiesce::experiments
