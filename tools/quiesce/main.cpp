// SPDX-License-Identifier: Apache-2.0
// quiesce - the command-line tool. Every subcommand lives in its own cmd_*.cpp; main lists
// them (below), parses and reports errors.
//
// Exit codes: 0 success, 1 the command ran and failed (e.g. verification mismatch),
// 2 bad usage (unknown option, invalid value) - always with one line on stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "long_options.hpp"
#include "quiesce/version.hpp"
#include "unknown_command.hpp"

namespace {

// Each adds its subcommand (commands.hpp), in `quiesce --help` order.
constexpr void (*commands[])(CLI::App&) = {
    quiesce::cli::add_info_command,     quiesce::cli::add_report_command,
    quiesce::cli::add_keygc_command,    quiesce::cli::add_sweep_command,
    quiesce::cli::add_sanitize_command, quiesce::cli::add_verity_command,
    quiesce::cli::add_bench_command,    quiesce::cli::add_completion_command,
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "quiesce - latency-bounded deferred work: workqueues, RCU and chunked work, "
      "with the experiments of three kernel latency fixes",
      "quiesce"};
  app.set_version_flag("--version",
                       fmt::format("quiesce {} (commit {}, {} build)", quiesce::version_string,
                                   quiesce::cli::build_commit, quiesce::cli::build_type));
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()); });
  for (const auto add : commands)
    add(app);

  if (const auto unknown =
          quiesce::cli::unknown_command(app, std::vector<std::string>(argv + 1, argv + argc))) {
    fmt::print(stderr, "{}\n", *unknown);
    return 2;
  }
  try {
    std::vector<std::string> args = quiesce::cli::expand_abbreviations(app, argc, argv);
    std::vector<char*> expanded;
    for (std::string& a : args)
      expanded.push_back(a.data());
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "quiesce: {} (see quiesce --help)\n", e.what());
    return 2;
  } catch (const quiesce::cli::usage_error& e) {
    fmt::print(stderr, "quiesce: {}\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "quiesce: invalid argument: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "quiesce: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
