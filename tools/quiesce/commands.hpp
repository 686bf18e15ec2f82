// SPDX-License-Identifier: Apache-2.0
// The CLI's commands, listed once (main.cpp's table, in `quiesce --help` order); each is
// defined in its cmd_*.cpp. The experiments that `quiesce report` runs are the table of
// src/experiments (quiesce/experiments/table.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>

namespace quiesce::cli {

// Each adds its subcommand to the app: options and callback.
void add_info_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_keygc_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_sanitize_command(CLI::App& app);
void add_verity_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_completion_command(CLI::App& app);

// What `quiesce --version` says besides the version (build_info.cpp, generated at build
// time by cmake/build_info.cmake): the commit ("unknown" outside git, "-dirty" when the
// tree had changes) and CMAKE_BUILD_TYPE.
extern const char* const build_commit;
extern const char* const build_type;

// Thrown by subcommands for bad input that the parser could not catch (a file that does
// not exist, an inconsistent combination): main prints one line and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace quiesce::cli
