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

// The watcher, the child's one thread: waits for the daemon to end (`pidfd`) unless the
// daemon says first, through `done`, that it served to the end. Never returns.
[[noreturn]] void watch(int pidfd, int done, const char* path, const char* fusermount, char** env) {
  const std::uint64_t all = ~std::uint64_t{0};  // the daemon's group may be signalled to stop it
  sys(SYS_rt_sigprocmask, SIG_BLOCK, &all, nullptr, sizeof all);
  sys(SYS_setsid);
  if (sys(SYS_chdir, "/") != 0) sys(SYS_exit_group, 1);  // pins nothing an admin unmounts
  // Holds none of the daemon's descriptors (/dev/fuse kept open would keep the connection
  // alive; a pipe on stdout would keep its reader waiting): its two, and /dev/null as 0-2.
  const unsigned lo = static_cast<unsigned>(pidfd < done ? pidfd : done);
  const unsigned hi = static_cast<unsigned>(pidfd < done ? done : pidfd);
  if (lo > 3) sys(SYS_close_range, 3u, lo - 1, 0u);
  if (hi > lo + 1) sys(SYS_close_range, lo + 1, hi - 1, 0u);
  sys(SYS_close_range, hi + 1, UINT_MAX, 0u);
  const long null = sys(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
  for (long fd = 0; fd < 3; ++fd)
    if (null >= 0 && null != fd) sys(SYS_dup3, null, fd, 0);
  if (null > 2) sys(SYS_close, null);
  pollfd p[2] = {{pidfd, POLLIN, 0}, {done, POLLIN, 0}};
  while (!mutant::watcher_does_not_wait) {
    if (sys(SYS_ppoll, p, 2, nullptr, nullptr, 0) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[0].revents != 0) break;  // the daemon has gone
    if (p[1].revents != 0) {
      char byte = 0;
      if (sys(SYS_read, done, &byte, 1) == 1) sys(SYS_exit_group, 0);  // served to the end
      p[1].fd = -1;  // closed without a word: the daemon is exiting
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

// `fd`, or a duplicate of it above 2 (the watcher makes 0-2 /dev/null); -1 and errno.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  errno = err;
  return high;
}

}  // namespace

int start_auto_unmount(const std::filesystem::path& mountpoint, const std::string& fusermount,
                       int& done) {
  done = -1;
  // (syscall: Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.)
  const int pidfd = above_stdio(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  if (pidfd < 0) return errno;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(pidfd);
    return err;
  }
  const int done_read = above_stdio(pipe_fds[0]);
  const int err_read = errno;
  // Everything the child needs is made before the fork.
  const std::string path = mountpoint.string();
  const char* helper = fusermount.empty() ? nullptr : fusermount.c_str();
  // _Fork: no fork handlers - the RCU ones would start callback threads in a child that
  // only makes system calls and keeps every signal blocked.
  const pid_t pid = done_read < 0 ? -1 : ::_Fork();
  if (pid == 0) watch(pidfd, done_read, path.c_str(), helper, environ);
  const int err = done_read < 0 ? err_read : pid < 0 ? errno : 0;
  ::close(pidfd);
  if (done_read >= 0) ::close(done_read);
  if (err != 0) {
    ::close(pipe_fds[1]);
    return err;
  }
  done = pipe_fds[1];
  return 0;
}

void end_auto_unmount(int& done) {
  if (done < 0) return;
  const char byte = 1;
  while (::write(done, &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(done);
  done = -1;
}

}  // namespace quiesce::mount::detail
