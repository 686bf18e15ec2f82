// SPDX-License-Identifier: Apache-2.0
#include "quiesce/thread.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "quiesce/log.hpp"

namespace quiesce {

namespace {

thread_local pid_t tls_tid = 0;  // the calling thread's tid once asked; 0 in a fork child

// A fork child's only thread is the one that forked, with a new tid: forget the cached one.
[[maybe_unused]] const int forget_tid_in_child =
    ::pthread_atfork(nullptr, nullptr, [] { tls_tid = 0; });

}  // namespace

pid_t this_thread_tid() noexcept {
  if (tls_tid == 0) tls_tid = ::gettid();
  return tls_tid;
}

std::string thread_name_of(pid_t tid) {
  std::FILE* f = std::fopen(fmt::format("/proc/self/task/{}/comm", tid).c_str(), "re");
  if (!f) return "?";
  char buf[32] = {};
  const bool ok = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  if (!ok) return "?";
  std::string name = buf;
  if (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

void set_this_thread_name(std::string_view name) {
  char buf[16] = {};  // the kernel's TASK_COMM_LEN, with the terminating NUL
  name.copy(buf, sizeof(buf) - 1);
  ::pthread_setname_np(::pthread_self(), buf);
}

std::string this_thread_name() {
  char buf[16] = {};
  if (::pthread_getname_np(::pthread_self(), buf, sizeof(buf)) != 0) return {};
  return buf;
}

bool pin_this_thread(const cpu_set& cpus) {
  if (cpus.empty()) throw std::invalid_argument("cpus: cannot pin a thread to no CPU");
  const cpu_set_t native = cpus.to_native();
  return ::sched_setaffinity(0, sizeof(native), &native) == 0;
}

bool set_this_thread_nice(int nice) {
  if (nice < -20 || nice > 19) {
    throw std::invalid_argument(fmt::format("nice: {} is outside -20..19", nice));
  }
  // On Linux, PRIO_PROCESS with a thread id changes only that thread.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(this_thread_tid()), nice) == 0) return true;
  const int err = errno;
  static std::atomic<bool> reported{false};  // A: exchange; first refusal reports
  if (!reported.exchange(true)) {
    log(log_level::warning,
        fmt::format("quiesce: cannot set nice {} for thread '{}': {}{}; its work runs at the "
                    "default priority (reported once)",
                    nice, this_thread_name(), std::strerror(err),
                    err == EACCES || err == EPERM ? " (needs CAP_SYS_NICE or RLIMIT_NICE)" : ""));
  }
  return false;
}

int this_thread_nice() {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(this_thread_tid()));
}

named_thread::named_thread(std::string name, std::function<void()> fn)
    : thread_([name = std::move(name), fn = std::move(fn)] {
        set_this_thread_name(name);
        fn();
      }) {}

named_thread::named_thread(std::string name, const cpu_set& cpus, std::function<void()> fn)
    : thread_([name = std::move(name), cpus, fn = std::move(fn)] {
        set_this_thread_name(name);
        if (!pin_this_thread(cpus)) {
          log(log_level::warning, fmt::format("quiesce: cannot pin thread '{}' to CPUs {}: {}",
                                              name, cpus.to_string(), std::strerror(errno)));
        }
        fn();
      }) {}

named_thread& named_thread::operator=(named_thread&& other) noexcept {
  if (this != &other) {
    if (thread_.joinable()) thread_.join();
    thread_ = std::move(other.thread_);
  }
  return *this;
}

named_thread::~named_thread() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace quiesce
