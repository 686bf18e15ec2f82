// SPDX-License-Identifier: Apache-2.0
// temp_dir (temp_dir.hpp).
#include "quiesce/host/temp_dir.hpp"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <system_error>

namespace quiesce::host {

temp_dir::temp_dir(const std::string& tag) {
  std::string name =
      (std::filesystem::temp_directory_path() / fmt::format("quiesce-{}-XXXXXX", tag)).string();
  if (!::mkdtemp(name.data())) {
    throw std::system_error(errno, std::generic_category(), "cannot create " + name);
  }
  path_ = name;
  try {
    cleanup_.emplace(exit_cleanup::remove_dir(name));
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    throw;
  }
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // whatever is inside, at any depth
  cleanup_.reset();                        // then nothing is left for the action to remove
}

}  // namespace quiesce::host
