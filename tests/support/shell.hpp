// SPDX-License-Identifier: Apache-2.0
// Test helpers for programs and files: run a shell command line and keep what it printed
// (killed, with a description of where it hung, past a deadline), read a whole file, tell
// whether a directory is a mount point.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace quiesce::test {

struct shell_result {
  int code;         // the exit status, -1 if the command did not exit normally
  std::string out;  // what it printed on stdout (and stderr if it redirects it there)
};

// How long one command line may run: generous for the slowest CLI run under TSan (tens of
// seconds), and shorter than ctest's per-test TIMEOUT (300 s, tests/CMakeLists.txt) so that
// a hung command is described and killed by run_shell, not cut off silently by ctest.
inline constexpr std::chrono::seconds shell_deadline{200};

// The whole file (empty if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `text` up to its first newline.
inline std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Where each thread of each process in process group `pgid` is: its name, state and kernel
// wait channel, its kernel stack (readable by root) and, where gdb is installed, its user
// stack. For the failure message of a command that ran past its deadline.
inline std::string describe_process_group(pid_t pgid) {
  namespace fs = std::filesystem;
  std::string text;
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(proc.path() / "stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    char state = '?';
    long ppid = 0, group = 0;
    if (!(fields >> state >> ppid >> group) || group != pgid) continue;
    std::string cmdline = slurp(proc.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    text += "\n--- process " + pid + ": " + cmdline;
    for (const auto& task : fs::directory_iterator(proc.path() / "task", ec)) {
      const std::string tstat = slurp(task.path() / "stat");
      const auto tp = tstat.rfind(')');
      text += "\n  thread " + task.path().filename().string() + " " +
              first_line(slurp(task.path() / "comm")) + " state " +
              (tp != std::string::npos && tp + 2 < tstat.size() ? tstat.substr(tp + 2, 1) : "?") +
              " wchan " + slurp(task.path() / "wchan") + "\n" + slurp(task.path() / "stack");
    }
    if (::access("/usr/bin/gdb", X_OK) == 0) {
      FILE* gdb = ::popen(
          ("timeout 30 gdb -p " + pid + " -batch -ex 'thread apply all bt' 2>&1").c_str(), "r");
      if (gdb) {
        char buf[512];
        while (std::fgets(buf, sizeof buf, gdb))
          text += buf;
        ::pclose(gdb);
      }
    }
  }
  return text;
}

// Runs a shell command line in a process group of its own. A command still running after
// `deadline` fails loudly: its group is described (describe_process_group) into `out`,
// then killed, and the result's code is -1.
inline shell_result run_shell(const std::string& cmd,
                              std::chrono::seconds deadline = shell_deadline) {
  shell_result r{-1, {}};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return r;
  // posix_spawn, as popen does: no fork of a multi-threaded test process.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);  // clears cloexec
  ::posix_spawnattr_init(&attr);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  ::posix_spawnattr_setpgroup(&attr, 0);  // a group of its own, led by the shell
  pid_t pid = -1;
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  const int spawned =
      ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return r;
  }
  ::close(fds[1]);
  const auto end = std::chrono::steady_clock::now() + deadline;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked at the top
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output: every writer has gone
    r.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) {
    r.out += "\n[run_shell: '" + cmd + "' still running after " + std::to_string(deadline.count()) +
             " s; killed. Where it was:" + describe_process_group(pid) + "\n]\n";
    ::kill(-pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = !timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Whether `dir` is a mount point of this process's namespace (/proc/self/mountinfo's fifth
// field).
inline bool is_mount_point(const std::filesystem::path& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    if (f >> id >> parent >> dev >> root >> point && point == dir.string()) return true;
  }
  return false;
}

}  // namespace quiesce::test
