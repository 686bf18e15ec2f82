// SPDX-License-Identifier: Apache-2.0
// An unknown command word, caught before parsing: "quiesce verity digset" names the command
// it looked for and the nearest real one ("did you mean 'digest'?"), as git does, instead
// of CLI11's "A subcommand is required".
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce::cli {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` if it is close enough to be a typo (at most a third of
// the word's length, at least 1, edits away), else nullopt.
std::optional<std::string> nearest(std::string_view word,
                                   const std::vector<std::string>& candidates);

// Walks the command words of args (argv without the program name; it stops at the first
// option or at a command that has no subcommands) and returns the line to print if one is
// not a command where a command is expected, e.g. "quiesce verity: unknown command
// 'digset' (did you mean 'digest'?; see quiesce verity --help)"; nullopt if all are.
std::optional<std::string> unknown_command(const CLI::App& app,
                                           const std::vector<std::string>& args);

}  // namespace quiesce::cli
