// SPDX-License-Identifier: Apache-2.0
// parse_key_users (/proc/key-users, for keygc --kernel's quota check): either
// std::runtime_error for a malformed line of the uid, or a quota; never a crash.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_check.hpp"
#include "quiesce/host/keyring.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const uid_t uid = data[0] % 4 == 0 ? 0 : data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto q = quiesce::host::parse_key_users(text, uid);
    if (q) {
      // A parsed line appears in the text with its uid.
      FUZZ_CHECK(text.find(':') != std::string::npos, "no ':' in a parsed line");
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
