// SPDX-License-Identifier: Apache-2.0
// The benchmarks' one reader of this process's resident set (/proc/self/statm).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>

// Bytes resident now; 0 if /proc cannot be read.
inline std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}
