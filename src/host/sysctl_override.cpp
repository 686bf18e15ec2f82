// SPDX-License-Identifier: Apache-2.0
// sysctl_override (sysctl_override.hpp): the old value is restored by an exit_cleanup
// action, prepared before the new value is written.
#include "quiesce/host/sysctl_override.hpp"
#include "../base/file_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace quiesce::host {

namespace {

std::atomic<bool> active{false};  // A: an override exists (one at a time)

bool write_value(const std::string& path, const std::string& value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  return ::close(fd) == 0 && ok;
}

// Claims the one-at-a-time slot before anything else is prepared.
std::string claim_and_read(const std::string& path) {
  if (active.exchange(true)) throw std::logic_error("sysctl_override: one at a time");
  try {
    return read_sysctl(path);
  } catch (...) {
    active = false;
    throw;
  }
}

}  // namespace

std::string read_sysctl(const std::string& path) {
  std::string v = read_file(path);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' '))
    v.pop_back();
  return v;
}

sysctl_override::sysctl_override(std::string path, const std::string& value)
    : path_(std::move(path)), old_(claim_and_read(path_)) {
  try {
    if (::access(path_.c_str(), W_OK) != 0) {
      throw std::runtime_error(fmt::format("cannot change {}: {}{}", path_, std::strerror(errno),
                                           ::geteuid() != 0 ? " (run as root)" : ""));
    }
    restore_.emplace(exit_cleanup::restore_file(path_, old_));
    if (!write_value(path_, value)) {
      const int err = errno;
      restore_.reset();  // writes the old value (still in place) back: harmless
      throw std::runtime_error(
          fmt::format("cannot set {} to '{}': {}", path_, value, std::strerror(err)));
    }
  } catch (...) {
    active = false;
    throw;
  }
}

sysctl_override::~sysctl_override() {
  restore_.reset();  // writes the old value back, unless a signal handler already did
  active = false;
}

}  // namespace quiesce::host
