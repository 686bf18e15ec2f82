// SPDX-License-Identifier: Apache-2.0
// trace_session (trace_session.hpp).
#include "trace_session.hpp"

#include <fmt/format.h>

#include <exception>

#include "quiesce/trace.hpp"

namespace quiesce::cli {

trace_session::trace_session(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  trace::clear();
  trace::enable(true);
}

void trace_session::write() {
  if (path_.empty() || written_) return;
  written_ = true;
  trace::enable(false);
  trace::write_chrome_json(path_);
  if (const std::uint64_t lost = trace::overwritten(); lost > 0) {
    fmt::print(stderr,
               "quiesce: --trace: {} older events were overwritten (each thread's ring keeps "
               "its newest events); the trace holds the rest\n",
               lost);
  }
  trace::clear();
}

trace_session::~trace_session() {
  try {
    write();
  } catch (const std::exception& e) {
    fmt::print(stderr, "quiesce: --trace: {}\n", e.what());
  }
}

std::function<void()> traced(CLI::App* app, std::function<void()> run) {
  auto path = std::make_shared<std::string>();
  app->add_option("--trace", *path,
                  "Write a Chrome trace (Perfetto) of the run: workqueue and RCU events");
  return [path, run = std::move(run)] {
    trace_session session(*path);
    run();
    session.write();
  };
}

}  // namespace quiesce::cli
