// SPDX-License-Identifier: Apache-2.0
// Unknown command words and their nearest real command (unknown_command.hpp).
#include "unknown_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace quiesce::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::optional<std::string> unknown_command(const CLI::App& app,
                                           const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  std::string path = app.get_name();
  for (const std::string& word : args) {
    if (word.empty() || word[0] == '-') return std::nullopt;  // options: the parser's part
    const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;  // a command's own arguments
    const auto it = std::find_if(subs.begin(), subs.end(),
                                 [&](const CLI::App* s) { return s->check_name(word); });
    if (it == subs.end()) {
      std::vector<std::string> names;
      for (const CLI::App* s : subs)
        names.push_back(s->get_name());
      const std::optional<std::string> near = nearest(word, names);
      return fmt::format("{}: unknown command '{}' ({}see {} --help)", path, word,
                         near ? fmt::format("did you mean '{}'?; ", *near) : "", path);
    }
    at = *it;
    path += " " + at->get_name();
  }
  return std::nullopt;
}

}  // namespace quiesce::cli
