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
#include <pthread.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "fs.hpp"
#include "mutant.hpp"

extern char** environ;

namespace quiesce::mount::detail {

namespace {

// The watcher runs in a child of a daemon that may have threads: only system calls there,
// made directly, in code no sanitizer instruments (a sanitizer's runtime or interceptors
// may take locks that a thread of the parent held at the fork).
#define QUIESCE_WATCHER_CODE __attribute__((no_sanitize("address", "thread", "undefined")))

// -1 and errno on failure.
template <typename... Args>
QUIESCE_WATCHER_CODE inline long sys(long nr, Args... args) {
  return ::syscall(nr, args...);
}

// Whether the mount on `name` (in the watcher's working directory) is one whose connection
// has ended: a forced getattr of its root (no cached attributes) answers ENOTCONN. A
// mountpoint the daemon unmounted answers as the directory under it; one someone mounted
// there since answers as that filesystem.
QUIESCE_WATCHER_CODE bool connection_ended(const char* name) {
  struct statx stx {};
  return sys(SYS_statx, AT_FDCWD, name, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE,
             &stx) != 0 &&
         errno == ENOTCONN;
}

// Closes every descriptor from 3 up but the three given (distinct, all above 2).
QUIESCE_WATCHER_CODE void close_all_but(unsigned a, unsigned b, unsigned c) {
  if (a > b) std::swap(a, b);
  if (b > c) std::swap(b, c);
  if (a > b) std::swap(a, b);
  unsigned from = 3;
  for (const unsigned keep : {a, b, c}) {
    if (keep > from) sys(SYS_close_range, from, keep - 1, 0u);
    from = keep + 1;
  }
  sys(SYS_close_range, from, UINT_MAX, 0u);
}

// What the watcher is given, all made before the fork.
struct watch_args {
  int pidfd;               // the daemon's
  int done;                // its end of the daemon's socket
  int dir;                 // the mountpoint's directory (O_PATH), held from before the mount
  const char* name;        // the mountpoint's name in it
  const char* path;        // the mountpoint's path, for fusermount3
  const char* fusermount;  // the setuid fusermount3 (a user's mount), or null (root's)
  char** env;
  const sigset_t* mask;  // the daemon's signal mask, for fusermount3
};

// The watcher, the child's one thread: waits for the daemon to end (`pidfd`) unless the
// daemon says first, through `done`, that it served to the end. Never returns.
[[noreturn]] QUIESCE_WATCHER_CODE void watch(const watch_args& a) {
  // Signals stay blocked, as the fork left them: the daemon's group may be signalled to stop.
  sys(SYS_setsid);
  // The mountpoint is named inside its directory as held: a directory above it renamed and
  // replaced by a symlink since (by a user who owns one) leads nowhere else.
  if (sys(SYS_fchdir, a.dir) != 0) sys(SYS_exit_group, 1);
  // Holds none of the daemon's descriptors (/dev/fuse kept open would keep the connection
  // alive; a pipe on stdout would keep its reader waiting): its three, /dev/null as 0-2.
  close_all_but(a.pidfd, a.done, a.dir);
  const long null = sys(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
  for (long fd = 0; fd < 3; ++fd)
    if (null >= 0 && null != fd) sys(SYS_dup3, null, fd, 0);
  if (null > 2) sys(SYS_close, null);
  // The daemon's end first: when both are ready (it served to the end and has exited), the
  // mount is looked at all the same.
  pollfd p[2] = {{a.pidfd, POLLIN, 0}, {a.done, POLLIN, 0}};
  while (!mutant::watcher_does_not_wait) {
    if (sys(SYS_ppoll, p, 2, nullptr, nullptr, 0) < 0) {
      if (errno == EINTR) continue;
      break;  // (looking is safe: a live mount answers)
    }
    if (p[0].revents != 0) break;  // the daemon has gone
    if (p[1].revents != 0) {
      char byte = 0;
      if (sys(SYS_read, a.done, &byte, 1) == 1) sys(SYS_exit_group, 0);  // served to the end
      p[1].fd = -1;  // closed without a word: the daemon is exiting
    }
  }
  const char* const target = mutant::watcher_walks_path ? a.path : a.name;
  if (!connection_ended(target) && !mutant::watcher_unmounts_blindly) sys(SYS_exit_group, 0);
  if (a.fusermount == nullptr) {
    sys(SYS_exit_group, sys(SYS_umount2, target, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : 1);
  }
  // A user's mount: the setuid fusermount3 unmounts what that user mounted (and walks the
  // path itself as fusermount3 does, as that user).
  const char* const argv[] = {"fusermount3", "-u", "-z", "-q", "--", a.path, nullptr};
  sys(SYS_rt_sigprocmask, SIG_SETMASK, a.mask, nullptr, sizeof(std::uint64_t));
  sys(SYS_execve, a.fusermount, argv, a.env);
  sys(SYS_exit_group, 1);
  __builtin_unreachable();
}

// `fd`, or a duplicate of it above 2 (the watcher makes 0-2 /dev/null; and no log line to
// stderr may reach the socket). Invalid (with errno) on failure.
fd_t above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd_t(fd);
  fd_t low(fd);
  return fd_t(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
}

}  // namespace

int start_auto_unmount(int dir, const std::string& name, const std::string& path,
                       const std::string& fusermount, fd_t& done) {
  done.reset();
  // (syscall: Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.)
  const fd_t pidfd = above_stdio(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  if (!pidfd) return errno;
  // A socket, not a pipe: the daemon's send() cannot raise SIGPIPE in a process that serves
  // and goes on, should the watcher be gone.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return errno;
  fd_t theirs = above_stdio(pair[0]);
  fd_t ours = above_stdio(pair[1]);
  if (!theirs || !ours) return errno;
  const fd_t held(::fcntl(dir, F_DUPFD_CLOEXEC, 3));
  if (!held) return errno;
  sigset_t all, mask;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &mask);  // no signal reaches the child before setsid
  const watch_args args{pidfd.get(),  theirs.get(),
                        held.get(),   name.c_str(),
                        path.c_str(), fusermount.empty() ? nullptr : fusermount.c_str(),
                        environ,      &mask};
  // _Fork: no fork handlers - the RCU ones would start callback threads in a child that
  // only makes system calls and keeps every signal blocked.
  const pid_t pid = ::_Fork();
  if (pid == 0) watch(args);
  const int err = pid < 0 ? errno : 0;
  ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  if (err == 0) done = std::move(ours);
  return err;
}

void end_auto_unmount(fd_t& done) {
  if (!done) return;
  const char byte = 1;
  while (::send(done.get(), &byte, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  done.reset();
}

}  // namespace quiesce::mount::detail
