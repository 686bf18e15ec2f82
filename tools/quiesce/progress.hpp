// SPDX-License-Identifier: Apache-2.0
// A progress line for long runs (report, sweep, keygc --compare, verity bench): on stderr,
// redrawn in place - "quiesce sweep keygc: chunk 64 (3/11) 27% ~41 s left" - and only when
// stderr is a terminal and the command is not printing JSON. Anywhere else (CI, pipes,
// --json) it prints nothing at all. The estimate of time left is the mean duration of the
// steps done so far times the steps remaining (none before the first step ends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quiesce::cli {

// Whether progress may be drawn: stderr is a terminal and `json` output was not asked for.
bool progress_wanted(bool json);

class progress_line {
 public:
  // `what` names the run ("quiesce report"); `steps` is how many step() calls it makes.
  progress_line(std::string what, std::size_t steps, bool enabled);
  ~progress_line();  // clears the line
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  // Starts the next step, named `phase`; redraws the line.
  void step(std::string_view phase);

  // The line as drawn for the current state (for tests of the wording).
  std::string line() const;

 private:
  std::string what_, phase_;
  std::size_t steps_ = 0, started_ = 0;
  std::uint64_t begin_ns_ = 0, step_begin_ns_ = 0;
  bool enabled_ = false;
};

}  // namespace quiesce::cli
