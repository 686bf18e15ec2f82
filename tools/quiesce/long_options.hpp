// SPDX-License-Identifier: Apache-2.0
// getopt_long's abbreviations for the CLI (scripts written for fsverity-utils say
// `--hash=sha512`): CLI11 takes long options only in full.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace quiesce::cli {

// argv with each "--PREFIX" or "--PREFIX=VALUE" that is not a long option of the command it
// follows, but the beginning of exactly one of them, spelled out in full (the value kept).
// Throws usage_error naming the possibilities if it begins several. Everything after "--"
// is left as it is.
std::vector<std::string> expand_abbreviations(const CLI::App& app, int argc, char** argv);

}  // namespace quiesce::cli
