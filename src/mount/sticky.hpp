// SPDX-License-Identifier: Apache-2.0
// The kernel's fs.protected_regular rule (fs/namei.c, may_create_in_sticky) for the mount's
// CREATE that finds the name taken: whether an O_CREAT open may open the existing file.
// The kernel checks a name it already knows itself; one it learns from the daemon's CREATE
// reply it takes as created, so for those the check is the daemon's. Not installed.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdio>

namespace quiesce::mount::detail {

// With fs.protected_regular at `level`, an O_CREAT open by fsuid `caller` that found the
// regular file `file` in the directory `dir`: 0, or EACCES when `dir` is sticky and
// world-writable (level >= 1) or group-writable (level 2) and the file is neither the
// caller's nor the directory owner's - the /tmp trap of a file made in advance by someone
// else. Other file types: 0 (the mount's CREATE never opens them).
inline int may_create_in_sticky(int level, uid_t caller, const struct stat& dir,
                                const struct stat& file) {
  if (level <= 0 || !(dir.st_mode & S_ISVTX) || !S_ISREG(file.st_mode)) return 0;
  if (file.st_uid == dir.st_uid || file.st_uid == caller) return 0;
  if (dir.st_mode & S_IWOTH) return EACCES;
  return level >= 2 && (dir.st_mode & S_IWGRP) ? EACCES : 0;
}

// fs.protected_regular now (0 if it cannot be read).
inline int protected_regular_level() {
  int level = 0;
  if (std::FILE* in = std::fopen("/proc/sys/fs/protected_regular", "re")) {
    if (std::fscanf(in, "%d", &level) != 1) level = 0;
    std::fclose(in);
  }
  return level;
}

}  // namespace quiesce::mount::detail
