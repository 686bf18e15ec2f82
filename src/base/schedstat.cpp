// SPDX-License-Identifier: Apache-2.0
#include "quiesce/schedstat.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <utility>

#include "quiesce/thread.hpp"

namespace quiesce {

namespace {

std::string schedstat_path(pid_t tid) {
  if (tid == 0) tid = this_thread_tid();
  return "/proc/self/task/" + std::to_string(tid) + "/schedstat";
}

bool take_u64(std::string_view& s, std::uint64_t& out) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return true;
}

}  // namespace

std::optional<sched_sample> parse_schedstat(std::string_view text) noexcept {
  sched_sample sample;
  if (!take_u64(text, sample.run_ns) || !take_u64(text, sample.run_delay_ns) ||
      !take_u64(text, sample.switches)) {
    return std::nullopt;
  }
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n'))
    text.remove_prefix(1);
  if (!text.empty()) return std::nullopt;
  return sample;
}

schedstat_reader::schedstat_reader(pid_t tid)
    : fd_(::open(schedstat_path(tid).c_str(), O_RDONLY | O_CLOEXEC)) {}

schedstat_reader::schedstat_reader(const std::filesystem::path& file)
    : fd_(::open(file.c_str(), O_RDONLY | O_CLOEXEC)) {}

schedstat_reader::schedstat_reader(schedstat_reader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

schedstat_reader& schedstat_reader::operator=(schedstat_reader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

schedstat_reader::~schedstat_reader() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<sched_sample> schedstat_reader::sample() const noexcept {
  if (fd_ < 0) return std::nullopt;
  char buf[128];
  const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return std::nullopt;  // ESRCH once the thread has exited
  return parse_schedstat(std::string_view(buf, static_cast<std::size_t>(n)));
}

std::optional<sched_sample> read_schedstat(pid_t tid) noexcept {
  try {
    return schedstat_reader(tid).sample();
  } catch (...) {  // path formatting may throw bad_alloc
    return std::nullopt;
  }
}

}  // namespace quiesce
