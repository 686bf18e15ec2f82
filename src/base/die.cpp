// SPDX-License-Identifier: Apache-2.0
// die() (die.hpp).
#include "die.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace quiesce::detail {

void die(const char* format, ...) noexcept {
  char buf[1024];
  static constexpr char prefix[] = "quiesce: ";
  std::memcpy(buf, prefix, sizeof prefix - 1);
  std::size_t n = sizeof prefix - 1;
  std::va_list args;
  va_start(args, format);
  const int len = std::vsnprintf(buf + n, sizeof buf - n - 1, format, args);
  va_end(args);
  if (len > 0)
    n += static_cast<std::size_t>(len) < sizeof buf - n - 1 ? static_cast<std::size_t>(len)
                                                            : sizeof buf - n - 2;
  buf[n++] = '\n';
  for (std::size_t at = 0; at < n;) {
    const ssize_t w = ::write(STDERR_FILENO, buf + at, n - at);
    if (w <= 0) break;
    at += static_cast<std::size_t>(w);
  }
  std::abort();
}

}  // namespace quiesce::detail
