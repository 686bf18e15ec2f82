// SPDX-License-Identifier: Apache-2.0
// Opening untrusted input files: regular files on real filesystems only, never blocking.
#include "regular_file.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace quiesce::verity::detail {

unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

unique_fd::~unique_fd() {
  if (fd_ >= 0) ::close(fd_);
}

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Filesystems whose regular files report sizes unrelated to their contents.
const char* pseudo_fs(const struct statfs& fs) {
  switch (static_cast<unsigned long>(fs.f_type)) {
    case PROC_SUPER_MAGIC:
      return "procfs";
    case SYSFS_MAGIC:
      return "sysfs";
    case DEBUGFS_MAGIC:
      return "debugfs";
    case TRACEFS_MAGIC:
      return "tracefs";
    case SECURITYFS_MAGIC:
      return "securityfs";
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return "cgroupfs";
    case BPF_FS_MAGIC:
      return "bpffs";
    case EFIVARFS_MAGIC:
      return "efivarfs";
    case PSTOREFS_MAGIC:
      return "pstore";
    default:
      return nullptr;
  }
}

}  // namespace

std::uint64_t check_regular(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(errno, name);
  if (S_ISDIR(st.st_mode)) fail(EISDIR, name);  // "Is a directory", as read(2) says
  if (!S_ISREG(st.st_mode))
    fail(EINVAL, name + ": " + kind_of(st.st_mode) + ", not a regular file");
  struct statfs sfs {};
  if (::fstatfs(fd, &sfs) != 0) fail(errno, name);
  if (const char* fs = pseudo_fs(sfs)) {
    fail(EINVAL, name + ": a file on " + fs + ", whose sizes are not its contents");
  }
  return static_cast<std::uint64_t>(st.st_size);
}

regular_file open_regular(const std::filesystem::path& path, int missing_errno) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    fail(err == ENOENT ? missing_errno : err, path.string());
  }
  const std::uint64_t size = check_regular(fd.get(), path.string());
  // Regular files ignore O_NONBLOCK for reads; cleared all the same.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail(errno, path.string());
  return {std::move(fd), size};
}

int pread_exact(int fd, void* buf, std::size_t size, std::uint64_t offset) noexcept {
  auto* at = static_cast<char*>(buf);
  for (std::size_t got = 0; got < size;) {
    const ssize_t r = ::pread(fd, at + got, size - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return EIO;  // the file shrank under us
    got += static_cast<std::size_t>(r);
  }
  return 0;
}

}  // namespace quiesce::verity::detail
