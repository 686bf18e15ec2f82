// SPDX-License-Identifier: Apache-2.0
// verity::from_hex (the --salt argument): either std::invalid_argument, or bytes whose
// to_hex() is the input in lower case.
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_check.hpp"
#include "quiesce/verity.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::uint8_t> bytes;
  try {
    bytes = quiesce::verity::from_hex(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  std::string lower = text;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  FUZZ_CHECK(quiesce::verity::to_hex(bytes) == lower, "'%s' does not round-trip", text.c_str());
  FUZZ_CHECK(bytes.size() * 2 == text.size(), "'%s': %zu bytes", text.c_str(), bytes.size());
  return 0;
}
