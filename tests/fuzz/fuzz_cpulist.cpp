// SPDX-License-Identifier: Apache-2.0
// cpu_set::parse (the kernel's cpulist format, read from sysfs and from users): either
// std::invalid_argument, or a set whose to_string() parses back to the same set.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_check.hpp"
#include "quiesce/cpu_set.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  quiesce::cpu_set s;
  try {
    s = quiesce::cpu_set::parse(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string again = s.to_string();
  const quiesce::cpu_set back = quiesce::cpu_set::parse(again);
  FUZZ_CHECK(back == s, "'%s' -> '%s' does not parse back", text.c_str(), again.c_str());
  for (int cpu : s)
    FUZZ_CHECK(cpu >= 0 && cpu < CPU_SETSIZE, "cpu %d out of range from '%s'", cpu, text.c_str());
  return 0;
}
