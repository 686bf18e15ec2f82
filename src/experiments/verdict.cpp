// SPDX-License-Identifier: Apache-2.0
// The verdict rule and the "what each patch bought here" rendering (verdict.hpp).
#include "quiesce/experiments/verdict.hpp"

#include <fmt/format.h>

namespace quiesce::experiments {

const char* to_string(verdict v) noexcept {
  switch (v) {
    case verdict::reproduced:
      return "reproduced";
    case verdict::within_noise:
      return "same direction, within noise";
    case verdict::not_reproduced:
      break;
  }
  return "not reproduced";
}

verdict judge(const run_spread& before, const run_spread& after, better seed_way) {
  if (before.runs.empty() || after.runs.empty()) return verdict::not_reproduced;
  const bool lower = seed_way == better::lower;
  const bool seed_direction =
      lower ? after.median() < before.median() : after.median() > before.median();
  if (!seed_direction) return verdict::not_reproduced;
  const bool apart = lower ? after.max() < before.min() : after.min() > before.max();
  return apart ? verdict::reproduced : verdict::within_noise;
}

double bought_row::change_pct() const {
  const double b = before.median();
  return b == 0 ? 0 : (after.median() - b) / b * 100.0;
}

nlohmann::json bought_row::to_json() const {
  return {{"seed", seed},
          {"metric", metric},
          {"published", published},
          {"seed_way", seed_way == better::lower ? "lower" : "higher"},
          {"before", before.to_json()},
          {"after", after.to_json()},
          {"change_pct", change_pct()},
          {"verdict", to_string(judged())},
          {"note", note}};
}

namespace {

std::string figure(const run_spread& s) {
  return fmt::format("{:.4g} ({:.4g} .. {:.4g})", s.median(), s.min(), s.max());
}

}  // namespace

std::string bought_markdown(const std::vector<bought_row>& rows) {
  if (rows.empty()) return "Nothing was measured.\n\n";
  std::string md =
      "| seed | figure | published | here: before -> after, median (range over runs) | "
      "change | verdict |\n|---|---|---|---|---|---|\n";
  for (const bought_row& r : rows) {
    md += fmt::format("| {} | {}{} | {} | {} -> {} | {:+.1f}% | {} |\n", r.seed, r.metric,
                      r.note.empty() ? "" : " (" + r.note + ")", r.published, figure(r.before),
                      figure(r.after), r.change_pct(), to_string(r.judged()));
  }
  md +=
      "\nThe rule, the same for every row: *reproduced* when the median moved the seed's way "
      "and the before and after ranges do not overlap; *same direction, within noise* when "
      "they overlap; *not reproduced* otherwise.\n\n";
  return md;
}

bought_row watched(std::string metric, better good, run_spread before, run_spread after) {
  bought_row r;
  r.metric = std::move(metric);
  r.seed_way = good;
  r.before = std::move(before);
  r.after = std::move(after);
  return r;
}

bool got_worse(const bought_row& r) {
  if (r.before.runs.empty() || r.after.runs.empty()) return false;
  return r.good_way.value_or(r.seed_way) == better::lower ? r.after.median() > r.before.median()
                                                          : r.after.median() < r.before.median();
}

std::string ours_sentence(const std::vector<bought_row>& judged,
                          const std::vector<bought_row>& watched) {
  std::string text = "Ours, by the rule of the first section:";
  const char* sep = " ";
  for (const bought_row& r : judged) {
    text += fmt::format("{}{}{} {:.4g} -> {:.4g} ({:+.1f}%), {}", sep, r.metric,
                        r.note.empty() ? "" : " (" + r.note + ")", r.before.median(),
                        r.after.median(), r.change_pct(), to_string(r.judged()));
    sep = "; ";
  }
  std::string worse;
  for (const auto* rows : {&judged, &watched}) {
    for (const bought_row& r : *rows) {
      if (!got_worse(r)) continue;
      // Beyond noise when the ranges do not overlap (the rule, in the wrong direction).
      const bool apart = r.good_way.value_or(r.seed_way) == better::lower
                             ? r.after.min() > r.before.max()
                             : r.after.max() < r.before.min();
      worse += fmt::format("{}{} {:.4g} -> {:.4g} ({:+.1f}%, {})", worse.empty() ? "" : "; ",
                           r.metric, r.before.median(), r.after.median(), r.change_pct(),
                           apart ? "beyond noise" : "within noise");
    }
  }
  text += ". Worse after the fix: " + (worse.empty() ? std::string("none") : worse) + ".";
  return text;
}

}  // namespace quiesce::experiments
