// SPDX-License-Identifier: Apache-2.0
// Test helpers for programs and files: run a shell command line and keep what it printed,
// read a whole file, tell whether a directory is a mount point.
#pragma once

#include <sys/wait.h>

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

// Runs a shell command line.
inline shell_result run_shell(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  shell_result r{-1, {}};
  if (!p) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p))
    r.out += buf;
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The whole file (empty if it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
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
