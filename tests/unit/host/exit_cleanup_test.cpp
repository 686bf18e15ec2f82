// SPDX-License-Identifier: Apache-2.0
// exit_cleanup: the undo actions run on a fatal signal, and the process still dies of it.
// Each scenario runs in a child process (this program again, running the scenario's
// DISABLED_ test) that the signal kills; the parent checks what is left behind.
#include "quiesce/host/exit_cleanup.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shell.hpp"

extern char** environ;

namespace fs = std::filesystem;
using quiesce::host::exit_cleanup;

namespace {

fs::path scratch_dir() {
  char tmpl[] = "/tmp/quiesce-exit-cleanup-XXXXXX";
  if (!::mkdtemp(tmpl)) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
  return tmpl;
}

[[noreturn]] void child_fail(const char* what) {
  std::fprintf(stderr, "child: %s: %s\n", what, std::strerror(errno));
  std::_Exit(100);
}

// ThreadSanitizer defers a signal to the thread's next intercepted call, and sometimes
// never runs it: 4 children in 30 hung here with the handler not run, though the main
// thread kept entering usleep() and nothing was pending; a second SIGINT then ran the
// handler and the test passed. Under TSan the parent repeats the signal until the child
// dies; elsewhere it sends one, as a user does.
#if defined(__SANITIZE_THREAD__)
constexpr bool signals_may_be_lost = true;
#else
constexpr bool signals_may_be_lost = false;
#endif

// Each scenario's child is a fresh process of this test program (posix_spawn of
// /proc/self/exe running the scenario's DISABLED_ test), not a fork: a child forked from
// this process inherits the runtime's threads' locks in whatever state they were - under
// ASan, a thread the child then started blocked for ever on the sanitizer's own registry
// lock, held by a parent thread at the moment of the fork.
//
// The child says it is ready on a pipe (fd QUIESCE_EC_READY), then is sent `sig`. The
// signal is blocked in the spawning thread, so the child starts with it blocked and the
// threads its runtime starts inherit that; the scenario unblocks it in its main thread
// only, so the handler runs on the thread this test controls.
int run_child_until_signalled(int sig, const std::string& scenario, const fs::path& dir) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  constexpr int child_ready_fd = 3;  // dup2 clears close-on-exec on the child's copy
  posix_spawn_file_actions_adddup2(&actions, ready[1], child_ready_fd);
  std::string filter = "--gtest_filter=ExitCleanupChild.DISABLED_" + scenario;
  std::string also = "--gtest_also_run_disabled_tests";
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), filter.data(), also.data(), nullptr};
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    env_strings.emplace_back(*e);
  env_strings.push_back("QUIESCE_EC_READY=" + std::to_string(child_ready_fd));
  env_strings.push_back("QUIESCE_EC_DIR=" + dir.string());
  env_strings.push_back("QUIESCE_EC_SIGNAL=" + std::to_string(sig));
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  sigset_t blocked, old;
  sigemptyset(&blocked);
  sigaddset(&blocked, sig);
  ::pthread_sigmask(SIG_BLOCK, &blocked, &old);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(ready[1]);
  if (rc != 0) {
    ::close(ready[0]);
    ADD_FAILURE() << "posix_spawn: " << std::strerror(rc);
    return -1;
  }
  char byte = 0;
  const ssize_t n = ::read(ready[0], &byte, 1);
  ::close(ready[0]);
  EXPECT_EQ(n, 1) << "the child died before it was ready";
  if (n == 1) ::kill(pid, sig);
  int status = 0;
  if (!signals_may_be_lost) {
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    return status;
  }
  // Under TSan: the signal again every second until the child is gone (each one is the
  // same request; the handler runs once and the process dies of it).
  for (int tick = 1;; ++tick) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got != 0) {
      ADD_FAILURE() << "waitpid: " << std::strerror(errno);
      return -1;
    }
    ::usleep(10'000);
    if (tick % 100 == 0) ::kill(pid, sig);
  }
}

// In the child: the scenario's environment.
struct child_env {
  int ready_fd = -1;
  int sig = 0;
  fs::path dir;
};
child_env this_child() {
  child_env c;
  const char* ready = std::getenv("QUIESCE_EC_READY");
  const char* dir = std::getenv("QUIESCE_EC_DIR");
  const char* sig = std::getenv("QUIESCE_EC_SIGNAL");
  if (!ready || !dir || !sig) {
    std::fprintf(stderr, "child: run only by ExitCleanup's tests\n");
    std::_Exit(102);
  }
  c.ready_fd = std::atoi(ready);
  c.sig = std::atoi(sig);
  c.dir = dir;
  return c;
}

// The child's main thread takes the signal from here on.
void unblock(int sig) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
}

// In a child: mounts a tmpfs at `mnt`, under exit_cleanup::unmount (armed first, so that no
// signal finds it mounted and unarmed).
exit_cleanup mount_tmpfs_to_unmount(const fs::path& mnt) {
  exit_cleanup unmount = exit_cleanup::unmount(mnt.string());
  if (::mount("quiesce-test", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) child_fail("mount");
  return unmount;
}

void say_ready_and_wait(int ready_fd) {
  if (::write(ready_fd, "r", 1) != 1) child_fail("write ready");
  // Not pause(): ThreadSanitizer defers a signal that arrives outside its blocking calls
  // until the thread next enters an intercepted one - pause() returning with EINTR and
  // being called again left the deferred handler pending for ever (1 run in 6). A sleep is
  // such a call, and the loop enters it again within a millisecond.
  for (;;)
    ::usleep(1000);
}

// Runs `scenario` (a child that mounts a tmpfs at DIR/mnt under exit_cleanup::unmount)
// `rounds` times, signalling each child with SIGINT: the child must die of the signal and
// leave nothing mounted. Skips where no tmpfs can be mounted.
void expect_signal_unmounts(const std::string& scenario, int rounds) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const fs::path dir = scratch_dir();
  const fs::path mnt = dir / "mnt";
  fs::create_directory(mnt);
  if (::mount("quiesce-test", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    const int e = errno;
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(e);
  }
  ASSERT_EQ(::umount2(mnt.c_str(), 0), 0);
  for (int round = 0; round < rounds; ++round) {
    const int status = run_child_until_signalled(SIGINT, scenario, dir);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT)
        << scenario << " round " << round << ": status " << status;
    const bool left_mounted = quiesce::test::is_mount_point(mnt);
    EXPECT_FALSE(left_mounted) << scenario << " round " << round << ": the tmpfs was left mounted";
    if (left_mounted) ::umount2(mnt.c_str(), MNT_DETACH);
    if (::testing::Test::HasFailure()) break;
  }
  fs::remove_all(dir);
}

TEST(ExitCleanup, ASignalRunsEveryPendingActionAndTheProcessDiesOfIt) {
  const fs::path dir = scratch_dir();
  const fs::path setting = dir / "setting";
  const fs::path doomed = dir / "doomed";
  std::ofstream(setting) << "changed";
  fs::create_directory(doomed);
  std::ofstream(doomed / "a") << "x";
  std::ofstream(doomed / "b") << "y";
  const int status = run_child_until_signalled(SIGTERM, "PendingActions", dir);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_EQ(quiesce::test::slurp(setting), "original");
  EXPECT_FALSE(fs::exists(doomed));
  fs::remove_all(dir);
}

TEST(ExitCleanupChild, DISABLED_PendingActions) {
  const child_env c = this_child();
  auto restore = exit_cleanup::restore_file((c.dir / "setting").string(), "original");
  auto remove = exit_cleanup::remove_dir((c.dir / "doomed").string());
  unblock(c.sig);
  say_ready_and_wait(c.ready_fd);
}

// A filesystem the process mounted is unmounted on a signal even while one of its threads
// reads a file in it (the traced keygc run: libtracefs reading trace_pipe_raw kept the
// instance busy), and only descriptors under it are touched: a thread writing a file
// elsewhere (the verity bench's data file) keeps working until the process dies of the
// signal - closing every descriptor made it fail with EBADF and abort.
TEST(ExitCleanup, ASignalReleasesOnlyTheDescriptorsThatKeepItsMountBusy) {
  expect_signal_unmounts("MountBusy", 5);
}

// As above, with a thread that opens a file under the mount again and again (libtracefs'
// readers open and close trace files as they go): a descriptor opened after the handler
// released the others keeps the filesystem busy, and the mount must still leave the mount
// table (KeygcKernelCli.SigintDuringATracedRunLeavesNoInstanceNorMount left tracefs mounted
// in 3 runs of 15 here until the handler detached a mount it could not unmount).
TEST(ExitCleanup, ASignalUnmountsAFilesystemAThreadKeepsReopening) {
#if defined(__SANITIZE_THREAD__)
  // The child's threads close descriptors while the handler points them at /dev/null: that
  // race is the scenario (a dying process's descriptor may be another file by then - harmless
  // as it dies), and ThreadSanitizer rightly reports it. The release (with the mutant) and
  // asan-ubsan presets run it.
  GTEST_SKIP() << "the child races close() against the handler's dup3() by design";
#endif
  expect_signal_unmounts("MountReopened", 20);
}

TEST(ExitCleanupChild, DISABLED_MountReopened) {
  const child_env c = this_child();
  const fs::path mnt = c.dir / "mnt";
  const exit_cleanup unmount = mount_tmpfs_to_unmount(mnt);
  const std::string file = (mnt / "busy").string();
  const int made = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (made < 0) child_fail("open");
  ::close(made);
  std::atomic<int> running{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      char buf[64];
      running.fetch_add(1);
      for (;;) {
        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          (void)::pread(fd, buf, sizeof buf, 0);
          ::close(fd);
        }
      }
    });
  }
  while (running.load() < 2) {
  }
  unblock(c.sig);
  say_ready_and_wait(c.ready_fd);
}

// A reference to the mount that no descriptor release drops - a mapping of a file in it -
// keeps it busy whatever the process's threads are doing when the signal comes: the plain
// unmount fails every time, and the mount must still leave the mount table (the reopening
// test above meets that case only when a reader opens a file inside the handler's window -
// with the other CPU busy, its mutant survived a CI run; this one kills
// host_unmount_never_detaches every time).
TEST(ExitCleanup, ASignalUnmountsAFilesystemAMappingKeepsBusy) {
  expect_signal_unmounts("MountMapped", 3);
}

TEST(ExitCleanupChild, DISABLED_MountMapped) {
  const child_env c = this_child();
  const fs::path mnt = c.dir / "mnt";
  const exit_cleanup unmount = mount_tmpfs_to_unmount(mnt);
  const int fd = ::open((mnt / "mapped").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) child_fail("create the file to map");
  void* const map = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) child_fail("mmap");
  ::close(fd);  // only the mapping holds the file now
  unblock(c.sig);
  say_ready_and_wait(c.ready_fd);
}

TEST(ExitCleanupChild, DISABLED_MountBusy) {
  const child_env c = this_child();
  const fs::path mnt = c.dir / "mnt";
  const exit_cleanup unmount = mount_tmpfs_to_unmount(mnt);
  const int inside = ::open((mnt / "busy").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  const int outside =
      ::open((c.dir / "data").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (inside < 0 || outside < 0) child_fail("open");
  std::atomic<int> running{0};
  // The I/O threads start with the signal blocked (this thread's mask), leaving it to
  // this thread.
  std::thread reader([&] {
    char buf[64];
    running.fetch_add(1);
    for (;;) {
      if (::pread(inside, buf, sizeof buf, 0) < 0) child_fail("read under the mount");
    }
  });
  std::thread writer([&] {
    char block[512] = {};
    running.fetch_add(1);
    for (;;) {
      if (::pwrite(outside, block, sizeof block, 0) != sizeof block) {
        std::fprintf(stderr, "child: writing outside the mount failed: %s\n", std::strerror(errno));
        std::abort();
      }
    }
  });
  while (running.load() < 2) {
  }
  unblock(c.sig);
  say_ready_and_wait(c.ready_fd);
}

}  // namespace
