// SPDX-License-Identifier: Apache-2.0
// auto_unmount: the process that unmounts the mount of a daemon that died without
// unmounting it (SIGKILL, a crash).
//
// libfuse's own auto_unmount (a fusermount3 that waits for a socket to close) races the
// kernel: the socket is one of the daemon's descriptors, and the exiting daemon may close
// it before /dev/fuse, whose last close is what ends the connection. A fusermount3 that
// looks in between finds the connection alive, does not unmount, and exits; the mount
// stays, answering ENOTCONN to every user (4 of 150 kills beside two busy CPUs here). This
// watcher waits for the daemon's pidfd instead, which reports the process only once all its
// threads have gone, their descriptors closed - the connection is over by then.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <string>

#include "fs.hpp"
#include "mutant.hpp"

extern char** environ;

namespace quiesce::mount::detail {

namespace {

// The watcher runs in a child of a daemon that may have threads: only system calls there,
// made directly (a sanitizer's interceptors of open or poll may take locks that a thread of
// the parent held at the fork). -1 and errno on failure.
template <typename... Args>
long sys(long nr, Args... args) {
  return ::syscall(nr, args...);
}

// Whether the mount at `path` is one whose connection has ended: a forced getattr of its
// root (no cached attributes) answers ENOTCONN. A mountpoint the daemon unmounted answers
// as the directory under it; one someone mounted there since answers as that filesystem.
bool connection_ended(const char* path) {
  struct statx stx {};
  return sys(SYS_statx, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE,
             &stx) != 0 &&
         errno == ENOTCONN;
}

// The watcher, the child's one thread. Never returns.
[[noreturn]] void watch(int pidfd, const char* path, const char* fusermount, char** env) {
  const std::uint64_t all = ~std::uint64_t{0};  // the daemon's group may be signalled to stop it
  sys(SYS_rt_sigprocmask, SIG_BLOCK, &all, nullptr, sizeof all);
  sys(SYS_setsid);
  if (sys(SYS_chdir, "/") != 0) sys(SYS_exit_group, 1);  // pins nothing an admin unmounts
  // Holds none of the daemon's descriptors (/dev/fuse kept open would keep the connection
  // alive; a pipe on stdout would keep its reader waiting).
  const long null = sys(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
  for (long fd = 0; fd < 3; ++fd)
    if (null >= 0 && null != fd) sys(SYS_dup3, null, fd, 0);
  if (pidfd > 3) sys(SYS_close_range, 3u, static_cast<unsigned>(pidfd) - 1, 0u);
  sys(SYS_close_range, static_cast<unsigned>(pidfd) + 1, UINT_MAX, 0u);
  if (!mutant::watcher_does_not_wait) {
    pollfd p{pidfd, POLLIN, 0};
    while (sys(SYS_ppoll, &p, 1, nullptr, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (!connection_ended(path) && !mutant::watcher_unmounts_blindly) sys(SYS_exit_group, 0);
  if (fusermount == nullptr) {
    sys(SYS_exit_group, sys(SYS_umount2, path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : 1);
  }
  // A user's mount: the setuid fusermount3 unmounts what that user mounted.
  const char* const argv[] = {"fusermount3", "-u", "-z", "-q", "--", path, nullptr};
  sys(SYS_execve, fusermount, argv, env);
  sys(SYS_exit_group, 1);
  __builtin_unreachable();
}

}  // namespace

int start_auto_unmount(const std::filesystem::path& mountpoint, const std::string& fusermount) {
  // (syscall: Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.)
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (pidfd < 0) return errno;
  if (pidfd < 3) {  // the child makes 0-2 /dev/null
    const int high = ::fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
    ::close(pidfd);
    if (high < 0) return errno;
    pidfd = high;
  }
  // Everything the child needs is made before the fork.
  const std::string path = mountpoint.string();
  const char* helper = fusermount.empty() ? nullptr : fusermount.c_str();
  // _Fork: no fork handlers - the RCU ones would start callback threads in a child that
  // only makes system calls and keeps every signal blocked.
  const pid_t pid = ::_Fork();
  if (pid == 0) watch(pidfd, path.c_str(), helper, environ);
  const int err = pid < 0 ? errno : 0;
  ::close(pidfd);
  return err;
}

}  // namespace quiesce::mount::detail
