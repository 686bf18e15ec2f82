// SPDX-License-Identifier: Apache-2.0
// A `quiesce verity mount` daemon for a test: SOURCE and MOUNTPOINT in a fresh directory,
// the daemon in the foreground as a child (its log kept), stopped and unmounted at the end.
// The CLI is QUIESCE_CLI, or $QUIESCE_MOUNT_CLI where set (the mount mutants, and an older
// build to show that a test fails on it). Root with /dev/fuse; skipped with the reason
// otherwise.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>

#include "shell.hpp"
#include "wait.hpp"

namespace quiesce::test {

inline std::string mount_cli() {
  const char* cli = std::getenv("QUIESCE_MOUNT_CLI");
  return cli && *cli ? cli : QUIESCE_CLI;
}

inline shell_result shell2(const std::string& cmd) {
  return run_shell(cmd + " 2>&1");
}

inline void write_random(const std::filesystem::path& p, std::size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes)
    c = static_cast<char>(rng());
  std::ofstream(p, std::ios::binary) << bytes;
}

inline std::optional<std::string> fuse_unusable() {
  if (::geteuid() != 0) return "needs root";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is not usable here";
  if (shell2("command -v fsverity").code != 0) return "fsverity-utils is not installed";
  return std::nullopt;
}

#define SKIP_UNLESS_FUSE()                                                 \
  do {                                                                     \
    if (auto why = ::quiesce::test::fuse_unusable()) GTEST_SKIP() << *why; \
  } while (0)

// The unprivileged user the attacks run as.
inline constexpr uid_t nobody_uid = 65534;
inline constexpr gid_t nobody_gid = 65534;

// Runs `fn` in a child process as nobody (no supplementary groups); its return value is
// the child's exit status (255 if it could not become nobody, 254 if it threw).
inline int as_nobody(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(nobody_gid, nobody_gid, nobody_gid) != 0 ||
        ::setresuid(nobody_uid, nobody_uid, nobody_uid) != 0) {
      std::_Exit(255);
    }
    int rc = 254;
    try {
      rc = fn();
    } catch (...) {
    }
    std::_Exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// An errno as a child's exit status (0 for success).
inline int errno_of(int rc) {
  return rc < 0 ? errno : 0;
}

class MountFixture : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("quiesce-mount-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(src_ = dir_ / "src");
    std::filesystem::create_directories(mnt_ = dir_ / "mnt");
    ::chmod(dir_.c_str(), 0755);
    ::chmod(src_.c_str(), 0755);
    ::chmod(mnt_.c_str(), 0755);
  }
  void TearDown() override {
    stop();
    if (is_mount_point(mnt_)) shell2("umount -l " + mnt_.string());
    std::filesystem::remove_all(dir_);
  }

  // Starts `quiesce verity mount SRC MNT -f ARGS` (with `prefix` before it, e.g. valgrind)
  // and waits for the mount.
  void start(const std::string& args = "", const std::string& prefix = "") {
    log_ = dir_ / "daemon.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string cmd = prefix + " " + mount_cli() + " verity mount " + src_.string() + " " +
                              mnt_.string() + " --foreground " + args + " >" + log_.string() +
                              " 2>&1";
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
      std::_Exit(127);
    }
    ASSERT_TRUE(eventually([&] {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;  // died: reported below
      }
      return is_mount_point(mnt_);
    })) << "the mount never appeared: "
        << slurp(log_);
    ASSERT_GT(pid_, 0) << "the daemon exited: " << slurp(log_);
  }
  // Sends `sig` and waits for the daemon; its wait status.
  // A daemon that does not end within the generous deadline is killed (and the test fails).
  int stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    const bool ended = eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; });
    if (!ended) {
      ADD_FAILURE() << "the daemon did not end on signal " << sig << ": " << daemon_log();
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    return status;
  }
  std::string daemon_log() { return slurp(log_); }

  std::filesystem::path dir_, src_, mnt_, log_;
  pid_t pid_ = -1;
};

}  // namespace quiesce::test
