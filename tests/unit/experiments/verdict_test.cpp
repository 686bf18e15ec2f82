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

// "Ours:" sentences use the rule, and name every figure that got worse - a seed row or a
// watched one - saying whether beyond the noise.
TEST(Verdict, OursSentenceNamesWhatGotWorse) {
  const bought_row runnable{.seed = "004",
                            .metric = "time runnable, ms",
                            .published = "-96%",
                            .seed_way = better::lower,
                            .before = of({40, 41.6, 74}),
                            .after = of({16.2, 24.9, 35.5}),
                            .note = {}};
  const bought_row cold{.seed = "004",
                        .metric = "cold start, ms",
                        .published = "-",
                        .seed_way = better::lower,
                        .before = of({309, 340, 376}),
                        .after = of({240, 350, 529}),
                        .note = "through the mount"};
  const std::string none = ours_sentence({runnable});
  EXPECT_NE(none.find("time runnable, ms 41.6 -> 24.9 (-40.1%), reproduced"), std::string::npos)
      << none;
  EXPECT_NE(none.find("Worse after the fix: none."), std::string::npos) << none;

  const std::string worse = ours_sentence(
      {runnable, cold},
      {watched("read p99, us", better::lower, of({300, 330, 360}), of({500, 594, 700})),
       watched("probe max, us", better::lower, pooled(10), pooled(9))});
  EXPECT_NE(worse.find("cold start, ms (through the mount) 340 -> 350 (+2.9%), not reproduced"),
            std::string::npos)
      << worse;
  EXPECT_NE(worse.find("Worse after the fix: cold start, ms 340 -> 350 (+2.9%, within noise); "
                       "read p99, us 330 -> 594 (+80.0%, beyond noise)."),
            std::string::npos)
      << worse;
  EXPECT_EQ(worse.find("probe max"), std::string::npos) << "it got better: " << worse;
  // A price the seed paid (its figure went up) is still better lower: cheaper is no worse.
  bought_row price{.seed = "000",
                   .metric = "total time",
                   .published = "+2.2%",
                   .seed_way = better::higher,
                   .before = of({120, 122}),
                   .after = of({90, 93}),
                   .note = {},
                   .good_way = better::lower};
  EXPECT_EQ(price.judged(), verdict::not_reproduced);
  EXPECT_FALSE(got_worse(price));
  EXPECT_NE(ours_sentence({price}).find("Worse after the fix: none."), std::string::npos);
  price.after = of({130, 131});
  EXPECT_TRUE(got_worse(price));
  EXPECT_TRUE(got_worse(watched("x", better::higher, of({2}), of({1}))));
  EXPECT_FALSE(got_worse(watched("x", better::higher, of({1}), of({2}))));
  EXPECT_FALSE(got_worse(watched("x", better::lower, of({}), of({2}))));
}

}  // namespace
}  // namespace quiesce::experiments
