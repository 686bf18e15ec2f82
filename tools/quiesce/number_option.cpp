// SPDX-License-Identifier: Apache-2.0
// Strict numeric options (number_option.hpp).
#include "number_option.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>
#include <type_traits>

#include "commands.hpp"

namespace quiesce::cli {

namespace {

template <typename T>
std::string describe(number_range<T> r) {
  if constexpr (std::is_floating_point_v<T>) {
    return fmt::format("a number in {}..{}", r.min, r.max);
  } else {
    return fmt::format("a whole number in {}..{}", r.min, r.max);
  }
}

[[noreturn]] void bad_value(const std::string& option, const std::string& text,
                            const std::string& expected) {
  throw CLI::ValidationError(option, fmt::format("'{}' is not {}", text, expected));
}

}  // namespace

template <typename T>
T parse_number(const std::string& option, const std::string& text, number_range<T> range) {
  T v{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, v);
  if (text.empty() || ec != std::errc{} || end != last) bad_value(option, text, describe(range));
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) bad_value(option, text, describe(range));
  }
  if (v < range.min || v > range.max) bad_value(option, text, describe(range));
  return v;
}

template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, T& value, const std::string& help,
                        number_range<T> range) {
  return app
      ->add_option_function<std::string>(
          name,
          [&value, name, range](const std::string& s) { value = parse_number(name, s, range); },
          fmt::format("{} ({})", help, describe(range)))
      ->default_str(fmt::format("{}", value));
}

template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, std::optional<T>& value,
                        const std::string& help, number_range<T> range) {
  return app->add_option_function<std::string>(
      name, [&value, name, range](const std::string& s) { value = parse_number(name, s, range); },
      fmt::format("{} ({})", help, describe(range)));
}

template <typename T>
CLI::Option* add_number(CLI::App* app, const std::string& name, std::vector<T>& values,
                        const std::string& help, number_range<T> range) {
  return app->add_option_function<std::vector<std::string>>(
      name,
      [&values, name, range](const std::vector<std::string>& texts) {
        values.clear();
        for (const std::string& s : texts)
          values.push_back(parse_number(name, s, range));
      },
      fmt::format("{} ({} each)", help, describe(range)));
}

#define QUIESCE_NUMBER_OPTION(T)                                                             \
  template T parse_number<T>(const std::string&, const std::string&, number_range<T>);       \
  template CLI::Option* add_number<T>(CLI::App*, const std::string&, T&, const std::string&, \
                                      number_range<T>);                                      \
  template CLI::Option* add_number<T>(CLI::App*, const std::string&, std::optional<T>&,      \
                                      const std::string&, number_range<T>);                  \
  template CLI::Option* add_number<T>(CLI::App*, const std::string&, std::vector<T>&,        \
                                      const std::string&, number_range<T>);
QUIESCE_NUMBER_OPTION(int)
QUIESCE_NUMBER_OPTION(unsigned)
QUIESCE_NUMBER_OPTION(unsigned long)
QUIESCE_NUMBER_OPTION(double)
#undef QUIESCE_NUMBER_OPTION

void refuse_beyond_memory(const std::string& option, const std::string& value,
                          std::uint64_t bytes) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") {
      if (bytes / 1024 > kib) {
        throw usage_error(
            fmt::format("{}: '{}' needs about {} MiB, more than the {} MiB "
                        "of memory available",
                        option, value, bytes >> 20, kib >> 10));
      }
      return;
    }
  }
}

void refuse_beyond_disk(const std::string& option, const std::string& value, std::uint64_t bytes,
                        const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return;
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (bytes > free_bytes) {
    throw usage_error(fmt::format("{}: '{}' needs {} MiB in {}, which has {} MiB free", option,
                                  value, bytes >> 20, dir, free_bytes >> 20));
  }
}

}  // namespace quiesce::cli
