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
#include <string>

#include "fs.hpp"
#include "mutant.hpp"

namespace quiesce::mount::detail {

namespace {

// Whether the mount at `path` is one whose connection has ended: a forced getattr of its
// root (no cached attributes) answers ENOTCONN. A mountpoint the daemon unmounted answers
// as the directory under it; one someone mounted there since answers as that filesystem.
bool connection_ended(const char* path) {
  struct statx stx {};
  return ::statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE, &stx) !=
             0 &&
         errno == ENOTCONN;
}

// The watcher: a child of a daemon that may have threads, so only async-signal-safe calls
// (system calls) from here on; its one thread. Never returns.
[[noreturn]] void watch(int pidfd, const char* path, const char* fusermount) {
  sigset_t all;
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);  // the daemon's group may be signalled to stop it
  ::setsid();
  if (::chdir("/") != 0) ::_exit(1);  // pins nothing the admin may want to unmount
  // Holds none of the daemon's descriptors (/dev/fuse kept open would keep the connection
  // alive; a pipe on stdout would keep its reader waiting).
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd)
    if (null >= 0 && null != fd) ::dup2(null, fd);
  if (pidfd > 3) ::close_range(3, static_cast<unsigned>(pidfd) - 1, 0);
  ::close_range(static_cast<unsigned>(pidfd) + 1, UINT_MAX, 0);
  if (!mutant::watcher_does_not_wait) {
    pollfd p{pidfd, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  }
  if (!connection_ended(path) && !mutant::watcher_unmounts_blindly) ::_exit(0);
  if (fusermount == nullptr) ::_exit(::umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : 1);
  // A user's mount: the setuid fusermount3 unmounts what that user mounted.
  const char* const argv[] = {"fusermount3", "-u", "-z", "-q", "--", path, nullptr};
  ::execv(fusermount, const_cast<char* const*>(argv));
  ::_exit(1);
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
  if (pid == 0) watch(pidfd, path.c_str(), helper);
  const int err = pid < 0 ? errno : 0;
  ::close(pidfd);
  return err;
}

}  // namespace quiesce::mount::detail
