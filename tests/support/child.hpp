// SPDX-License-Identifier: Apache-2.0
// Test helper for child processes a test forked: wait for one with a deadline, and when it
// does not end in time, say what each of its threads was doing (from /proc) before killing
// it - so that a hang fails with its cause instead of holding the test until CTest's limit.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace quiesce::test {

// Each thread of `pid`: its name, state, kernel wait channel and system call (the number
// and arguments, /proc/PID/task/TID/syscall), one line each.
inline std::string describe_threads(pid_t pid) {
  std::ostringstream out;
  const auto read_line = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    return line;
  };
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    const std::string stat = read_line(t.path() / "stat");
    const std::size_t paren = stat.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    out << "  thread " << t.path().filename().string() << " '" << read_line(t.path() / "comm")
        << "' state " << state << ", wchan " << read_line(t.path() / "wchan") << ", syscall "
        << read_line(t.path() / "syscall") << "\n";
  }
  return out.str();
}

// Waits for `pid` to end, at most `limit`. Its wait status, or nullopt after `limit` - and
// then `what` describes its threads, and it has been killed (SIGKILL) and reaped.
inline std::optional<int> wait_child(pid_t pid, std::chrono::seconds limit, std::string& what) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) {
      what = "waitpid failed";
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  what = "still running after " + std::to_string(limit.count()) + " s:\n" + describe_threads(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

}  // namespace quiesce::test
