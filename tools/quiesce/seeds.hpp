// SPDX-License-Identifier: Apache-2.0
// The three seed patches: what each fixed and the numbers its authors published, so every
// report shows ours beside theirs.
#pragma once

#include <string>
#include <vector>

namespace quiesce::cli {

struct seed {
  std::string id;          // "000"
  std::string patch;       // the patch subject
  std::string problem;     // one sentence: the latency bug
  std::string experiment;  // the subcommand that reproduces it
  std::string published;   // the published before/after result (Markdown)
};

const std::vector<seed>& seeds();

}  // namespace quiesce::cli
