// SPDX-License-Identifier: Apache-2.0
// The verdict rule (verdict.hpp), at both ends of each case.
#include "quiesce/experiments/verdict.hpp"

#include <gtest/gtest.h>

namespace quiesce::experiments {
namespace {

run_spread of(std::vector<double> runs) {
  run_spread s;
  s.runs = std::move(runs);
  return s;
}

TEST(Verdict, LowerIsTheSeedsWay) {
  const run_spread before = of({10, 11, 12});
  EXPECT_EQ(judge(before, of({1, 2, 3}), better::lower), verdict::reproduced);
  // Touching ranges overlap: within noise.
  EXPECT_EQ(judge(before, of({8, 9, 10}), better::lower), verdict::within_noise);
  EXPECT_EQ(judge(before, of({7, 9, 9.99}), better::lower), verdict::reproduced);
  EXPECT_EQ(judge(before, of({9, 10.5, 13}), better::lower), verdict::within_noise);
  EXPECT_EQ(judge(before, of({11, 11, 11}), better::lower), verdict::not_reproduced);  // no change
  EXPECT_EQ(judge(before, of({12, 13, 14}), better::lower), verdict::not_reproduced);
  EXPECT_EQ(judge(before, of({20, 30, 40}), better::lower), verdict::not_reproduced);
}

TEST(Verdict, HigherIsTheSeedsWay) {
  const run_spread before = of({10, 11, 12});
  EXPECT_EQ(judge(before, of({13, 14, 15}), better::higher), verdict::reproduced);
  EXPECT_EQ(judge(before, of({12, 13, 14}), better::higher), verdict::within_noise);
  EXPECT_EQ(judge(before, of({1, 2, 3}), better::higher), verdict::not_reproduced);
}

TEST(Verdict, NothingMeasuredIsNotReproduced) {
  EXPECT_EQ(judge(of({}), of({1}), better::lower), verdict::not_reproduced);
  EXPECT_EQ(judge(of({2}), of({}), better::lower), verdict::not_reproduced);
}

TEST(Verdict, Words) {
  EXPECT_STREQ(to_string(verdict::reproduced), "reproduced");
  EXPECT_STREQ(to_string(verdict::within_noise), "same direction, within noise");
  EXPECT_STREQ(to_string(verdict::not_reproduced), "not reproduced");
}

TEST(Verdict, RowsRenderTheirVerdictAndChange) {
  const bought_row row{.seed = "004",
                       .metric = "time runnable, ms",
                       .published = "-96%",
                       .seed_way = better::lower,
                       .before = of({40, 41.6, 74}),
                       .after = of({16.2, 24.9, 35.5}),
                       .note = {}};
  EXPECT_EQ(row.judged(), verdict::reproduced);
  EXPECT_NEAR(row.change_pct(), (24.9 - 41.6) / 41.6 * 100, 1e-9);
  EXPECT_EQ(row.to_json()["verdict"], "reproduced");
  const std::string md = bought_markdown({row});
  EXPECT_NE(md.find("| 004 | time runnable, ms | -96% | 41.6 (40 .. 74) -> 24.9 (16.2 .. 35.5) | "
                    "-40.1% | reproduced |"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace quiesce::experiments
