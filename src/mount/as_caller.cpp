// SPDX-License-Identifier: Apache-2.0
// Running one operation as the request's caller (fs.hpp: as_caller): this thread's
// filesystem uid and gid, its supplementary groups and its capabilities - each switched
// with the raw system call, which changes the calling thread alone (glibc's setgroups
// would change every thread of the process).
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../base/die.hpp"
#include "fs.hpp"
#include "mutant.hpp"

namespace quiesce::mount::detail {

namespace {

[[noreturn]] void die(const char* what) {
  quiesce::detail::die("verity mount: %s: %s - cannot serve requests safely", what,
                       std::strerror(errno));
}

struct caps {
  __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
};

caps get_caps() {
  caps c;
  if (::syscall(SYS_capget, &c.head, c.data) != 0) die("capget");
  return c;
}

void set_caps(caps c) {
  c.head = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (::syscall(SYS_capset, &c.head, c.data) != 0) die("capset");
}

void set_groups(const std::vector<gid_t>& groups) {
  if (::syscall(SYS_setgroups, groups.size(), groups.data()) != 0) die("setgroups");
}

// The supplementary groups of thread `tid` (its /proc status "Groups:" line), or nullopt
// if it is gone. Our own reader: libfuse 3.14's fuse_req_getgroups reads the file into a
// page-sized buffer without terminating it, and runs strstr past its end when the file is
// longer (AddressSanitizer saw it here).
std::optional<std::vector<gid_t>> groups_of(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(tid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t at = text.find("\nGroups:");
  if (at == std::string::npos) return std::nullopt;
  std::vector<gid_t> groups;
  const char* p = text.c_str() + at + 8;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      ++p;
    if (*p < '0' || *p > '9') break;
    char* end = nullptr;
    groups.push_back(static_cast<gid_t>(std::strtoul(p, &end, 10)));
    p = end;
  }
  return groups;
}

// The identity a thread runs with between requests: the daemon's (root).
thread_local std::vector<gid_t> root_groups;
thread_local caps root_caps;

}  // namespace

as_caller::as_caller(fuse_req_t req) {
  const filesystem& f = fs_of(req);
  if (!f.switch_creds) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid == 0) return;
  // Without the caller's groups (it exited), none: never root's.
  const std::vector<gid_t> groups = groups_of(ctx->pid).value_or(std::vector<gid_t>{});
  root_caps = get_caps();
  root_groups.resize(static_cast<std::size_t>(::getgroups(0, nullptr)));
  if (::getgroups(static_cast<int>(root_groups.size()), root_groups.data()) < 0) die("getgroups");
  set_groups(groups);
  ::setfsgid(ctx->gid);
  ::setfsuid(ctx->uid);
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != ctx->uid) die("setfsuid");
  if (static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != ctx->gid) die("setfsgid");
  // No capability in effect: the source checks this operation as the caller's own (root's
  // CAP_SYS_ADMIN would set trusted.* xattrs, CAP_SETFCAP file capabilities...).
  caps none = root_caps;
  none.data[0].effective = none.data[1].effective = 0;
  set_caps(none);
  switched_ = true;
}

as_caller::~as_caller() {
  if (!switched_) return;
  set_caps(root_caps);
  ::setfsuid(0);
  ::setfsgid(0);
  if (::setfsuid(static_cast<uid_t>(-1)) != 0 || ::setfsgid(static_cast<gid_t>(-1)) != 0) {
    die("setfsuid back to root");
  }
  set_groups(root_groups);
}

int drop_sgid_for_caller(fuse_req_t req, int fd) {
  if constexpr (mutant::sgid_old_rule) return 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno;
  if (!S_ISREG(st.st_mode) || (st.st_mode & S_ISGID) == 0) return 0;
  if ((st.st_mode & S_IXGRP) != 0) return 0;  // the client's rule covers it
  if (!fs_of(req).switch_creds) return 0;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid == 0 || ctx->gid == st.st_gid) return 0;
  // Without the caller's groups (it exited), none.
  const std::vector<gid_t> groups = groups_of(ctx->pid).value_or(std::vector<gid_t>{});
  for (const gid_t g : groups) {
    if (g == st.st_gid) return 0;
  }
  // As the kernel's file_remove_privs: before the data changes, and a failure (an
  // append-only file: EPERM) fails the write.
  return ::fchmod(fd, st.st_mode & 07777 & ~S_ISGID) == 0 ? 0 : errno;
}

int as_caller::may_write(int path_fd) const {
  // As the caller (this object switched to them): faccessat with AT_EACCESS checks with
  // the filesystem ids and capabilities in effect, as the kernel's enable does.
  return ::faccessat(AT_FDCWD, proc_path(path_fd).c_str(), W_OK, AT_EACCESS) == 0 ? 0 : errno;
}

}  // namespace quiesce::mount::detail
