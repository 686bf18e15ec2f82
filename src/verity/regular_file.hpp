// SPDX-License-Identifier: Apache-2.0
// Opening untrusted input files - fs-verity data files and sidecars - so that hostile ones
// cost bounded work: regular files on real filesystems only, opened without blocking, read
// by exact sizes. Not installed.
#pragma once

#include <sys/types.h>

#include <cerrno>

#include <cstdint>
#include <filesystem>
#include <string>

namespace quiesce::verity::detail {

// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd();
  int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// An open regular file and its size at open.
struct regular_file {
  unique_fd fd;
  std::uint64_t size = 0;
};

// Opens `path` read-only (following symlinks: what counts is what it names). The open never
// blocks (O_NONBLOCK, cleared after the checks) and the result must be a regular file on a
// filesystem whose sizes are real - not procfs, sysfs, debugfs, tracefs, securityfs,
// cgroupfs, bpffs, efivarfs or pstore, whose files claim sizes unrelated to what they read.
// Throws std::system_error: the open's errno (`missing_errno` instead of ENOENT), or EINVAL
// naming `path` and what it is.
regular_file open_regular(const std::filesystem::path& path, int missing_errno = ENOENT);
// The same checks on a descriptor the caller opened (without blocking): regular, on a real
// filesystem. Returns its size; throws std::system_error EISDIR/EINVAL naming `name`.
std::uint64_t check_regular(int fd, const std::string& name);

// Throws std::system_error(err, generic_category(), what): how every input error of the
// verity sources is reported.
[[noreturn]] void fail(int err, const std::string& what);

// Reads exactly `size` bytes at `offset`, retrying short reads and EINTR. 0, or an errno
// (EIO if the file ends first).
int pread_exact(int fd, void* buf, std::size_t size, std::uint64_t offset) noexcept;

}  // namespace quiesce::verity::detail
