// SPDX-License-Identifier: Apache-2.0
// quiesce/thread.hpp - named threads, CPU pinning and priority, the way workers need them.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "quiesce/cpu_set.hpp"

namespace quiesce {

// The kernel thread id of the calling thread (gettid), as used in /proc/self/task/TID.
// One system call per thread: the value is cached (and forgotten in a fork child).
pid_t this_thread_tid() noexcept;

// Names the calling thread (visible in top, /proc/self/task/TID/comm, gdb, traces). Linux
// keeps 15 bytes: longer names are truncated.
void set_this_thread_name(std::string_view name);
// The calling thread's name as the kernel holds it.
std::string this_thread_name();
// The name of thread `tid` of this process (/proc/self/task/TID/comm), or "?" if it has
// exited or cannot be read.
std::string thread_name_of(pid_t tid);

// Restricts the calling thread to `cpus`. Returns false (errno-style failure, nothing
// changed) if the kernel refuses, e.g. none of the CPUs is allowed by the cgroup.
// Throws std::invalid_argument if `cpus` is empty.
bool pin_this_thread(const cpu_set& cpus);

// Sets the calling thread's nice value (-20 .. 19; lower runs first). Raising priority
// (a value below the current one) needs CAP_SYS_NICE or RLIMIT_NICE. Returns false if not
// permitted; the first refusal in the process is reported once through the log sink,
// naming what was asked for and why it failed, later ones silently.
// Throws std::invalid_argument if nice is outside -20 .. 19.
bool set_this_thread_nice(int nice);
// The calling thread's nice value.
int this_thread_nice();

// A std::thread that names itself (and optionally pins itself) before running its
// function, and joins on destruction, like std::jthread without a stop token.
class named_thread {
 public:
  named_thread() = default;
  named_thread(std::string name, std::function<void()> fn);
  named_thread(std::string name, const cpu_set& cpus, std::function<void()> fn);
  named_thread(named_thread&&) noexcept = default;
  named_thread& operator=(named_thread&& other) noexcept;
  ~named_thread();

  bool joinable() const noexcept { return thread_.joinable(); }
  void join() { thread_.join(); }
  std::thread::id get_id() const noexcept { return thread_.get_id(); }

 private:
  std::thread thread_;
};

}  // namespace quiesce
