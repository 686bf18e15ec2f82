// SPDX-License-Identifier: Apache-2.0
// Numeric command-line options, parsed strictly. CLI11 2.1 reads "-5" into an unsigned
// as a huge number and "99999999999999999999" as something else again; these options take
// the value as typed and accept only a whole decimal number (or, for floating-point
// options, a finite decimal number) inside the option's range. Anything else - a sign
// where none is allowed, trailing text, an empty value, a value out of range - is a usage
// error naming the option and the value as typed (main: exit 2, one line), raised while
// parsing, before the command runs or creates anything.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace quiesce::cli {

// The accepted range of a numeric option, both ends included.
template <typename T>
struct number_range {
  T min;
  T max;
};

// Parses `text` for `option`; throws CLI::ValidationError (a CLI::ParseError) on anything
// but a number inside `range`.
template <typename T>
T parse_number(const std::string& option, const std::string& text, number_range<T> range);

// add_option for a number: `value` keeps its default unless the option is given.
template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, T& value, const std::string& help,
                        number_range<T> range);
template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, std::optional<T>& value,
                        const std::string& help, number_range<T> range);
template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, std::vector<T>& values,
                        const std::string& help, number_range<T> range);

// Refuses (a usage error naming the option and its value) a size the machine cannot hold:
// `bytes` more than the memory available now (/proc/meminfo MemAvailable), or more free
// space than the filesystem holding `dir` has. Where the figure cannot be read, nothing is
// refused.
void refuse_beyond_memory(const std::string& option, const std::string& value, std::uint64_t bytes);
void refuse_beyond_disk(const std::string& option, const std::string& value, std::uint64_t bytes,
                        const std::string& dir);

}  // namespace quiesce::cli
