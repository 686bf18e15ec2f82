// SPDX-License-Identifier: Apache-2.0
#include "registry.hpp"

namespace quiesce::cli {

std::vector<command>& commands() {
  static std::vector<command> all;
  return all;
}

std::vector<experiment>& experiments() {
  static std::vector<experiment> all;
  return all;
}

}  // namespace quiesce::cli
