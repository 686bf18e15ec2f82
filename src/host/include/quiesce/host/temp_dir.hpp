// SPDX-License-Identifier: Apache-2.0
// A private temporary directory for a command's files (the verity bench's data file and
// its sidecar), removed on every way out: the destructor, and the signals exit_cleanup
// handles (there, the files directly in it and the directory itself).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "quiesce/host/exit_cleanup.hpp"

namespace quiesce::host {

class temp_dir {
 public:
  // Creates $TMPDIR/quiesce-TAG-XXXXXX (mode 0700, an unpredictable name). Throws
  // std::system_error naming the path if it cannot.
  explicit temp_dir(const std::string& tag);
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::optional<exit_cleanup> cleanup_;
};

}  // namespace quiesce::host
