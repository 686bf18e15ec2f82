// SPDX-License-Identifier: Apache-2.0
// Debian's cyclictest beside the probe (cyclictest.hpp).
#include "quiesce/host/cyclictest.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "quiesce/cpu_set.hpp"

extern char** environ;

namespace quiesce::host {

namespace {

std::optional<std::string> find_cyclictest() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = dirs.find(':', start);
    const std::string dir = dirs.substr(start, colon - start);
    const std::string file = (dir.empty() ? "." : dir) + "/cyclictest";
    if (::access(file.c_str(), X_OK) == 0) return file;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> cyclictest_unavailable() {
  if (find_cyclictest()) return std::nullopt;
  return "cyclictest is not installed (Debian: rt-tests)";
}

std::optional<std::uint64_t> parse_cyclictest_max(const std::string& output) {
  std::optional<std::uint64_t> best;
  for (std::size_t at = output.find("Max:"); at != std::string::npos;
       at = output.find("Max:", at + 4)) {
    std::size_t i = at + 4;
    while (i < output.size() && output[i] == ' ')
      ++i;
    std::uint64_t v = 0;
    bool digits = false;
    for (; i < output.size() && output[i] >= '0' && output[i] <= '9'; ++i) {
      v = v * 10 + static_cast<std::uint64_t>(output[i] - '0');
      digits = true;
    }
    if (digits && (!best || v > *best)) best = v;
  }
  return best;
}

cyclictest_run::cyclictest_run(int cpu, int priority) {
  const auto exe = find_cyclictest();
  if (!exe) throw std::runtime_error(*cyclictest_unavailable());
  int main_cpu = cpu;
  const cpu_set mine = cpu_set::current_affinity();
  for (int c : mine.cpus()) {
    if (c != cpu) {
      main_cpu = c;
      break;
    }
  }
  std::vector<std::string> args = {"cyclictest", "-q", "-N", "-t1", fmt::format("-a{}", cpu),
                                   fmt::format("-p{}", priority),
                                   // -p0 alone defaults to SCHED_FIFO 2: ask for OTHER
                                   priority > 0 ? "--policy=fifo" : "--policy=other", "-i1000",
                                   fmt::format("--mainaffinity={}", main_cpu)};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("cyclictest: no pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  const int rc = posix_spawn(&pid_, exe->c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    pid_ = -1;
    throw std::runtime_error(fmt::format("cannot start cyclictest: {}", std::strerror(rc)));
  }
  out_ = fds[0];
}

cyclictest_run::~cyclictest_run() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (out_ >= 0) ::close(out_);
}

bool cyclictest_run::measuring() const {
  // Its measuring thread (any task but the main one) has run several times: it is in its
  // loop of timed sleeps, not setting up.
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid_), ec)) {
    if (e.path().filename() == std::to_string(pid_)) continue;
    std::ifstream in(e.path() / "schedstat");
    std::uint64_t run_ns = 0, wait_ns = 0, slices = 0;
    if (in >> run_ns >> wait_ns >> slices && slices >= 5) return true;
  }
  return false;
}

std::uint64_t cyclictest_run::stop() {
  if (pid_ <= 0) throw std::logic_error("cyclictest_run::stop: not running");
  ::kill(pid_, SIGINT);
  std::string output;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n > 0) {
      output.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: it exited
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  const auto max = parse_cyclictest_max(output);
  if (!max) {
    throw std::runtime_error(fmt::format("cyclictest reported no latency (status {}): {}", status,
                                         output.substr(0, 300)));
  }
  return *max;  // -N: nanoseconds
}

}  // namespace quiesce::host
