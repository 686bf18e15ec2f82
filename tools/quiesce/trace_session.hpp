// SPDX-License-Identifier: Apache-2.0
// `--trace FILE` for an experiment command: tracing on for the command's run, then the
// events written as Chrome trace JSON (quiesce/trace.hpp; open in https://ui.perfetto.dev).
// With an empty path it does nothing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

namespace quiesce::cli {

class trace_session {
 public:
  explicit trace_session(std::string path);
  // Stops tracing; writes the file unless write() already did (errors are reported on
  // stderr here: a destructor cannot throw them).
  ~trace_session();
  trace_session(const trace_session&) = delete;
  trace_session& operator=(const trace_session&) = delete;

  // Stops tracing and writes the file now; throws std::system_error if it cannot.
  void write();

 private:
  std::string path_;
  bool written_ = false;
};

// Adds `--trace FILE` to `app` and returns `run` wrapped in a trace_session for it: the
// command's callback (app->callback(traced(app, run))).
std::function<void()> traced(CLI::App* app, std::function<void()> run);

}  // namespace quiesce::cli
