#include "sysctl_override.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace quiesce::cli {

namespace {

constexpr std::array kSignals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// What the signal handler needs, prepared before the handlers are installed. One override
// at a time: `active` guards the slot (set by the constructor, cleared by the destructor).
struct restore_slot {
  char path[256];
  char value[64];
  std::size_t value_len;
  struct sigaction previous[kSignals.size()];
};
restore_slot slot;                  // written only while `active` is false
std::atomic<bool> active{false};    // A
std::atomic<bool> restored{false};  // A: the old value is back (handler or destructor)

bool write_value(const char* path, const char* value, std::size_t len) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, value, len) == static_cast<ssize_t>(len);
  return ::close(fd) == 0 && ok;
}

void restore_on_signal(int sig) {
  if (!restored.exchange(true)) write_value(slot.path, slot.value, slot.value_len);
  // Die of the signal as the process would have without us.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

std::string read_sysctl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  std::string v = s.str();
  while (!v.empty() && (v.back() == '\n' || v.back() == ' '))
    v.pop_back();
  return v;
}

sysctl_override::sysctl_override(std::string path, const std::string& value)
    : path_(std::move(path)), old_(read_sysctl(path_)) {
  if (path_.size() >= sizeof slot.path || old_.size() >= sizeof slot.value) {
    throw std::runtime_error(fmt::format("{}: path or value too long to restore", path_));
  }
  if (::access(path_.c_str(), W_OK) != 0) {
    throw std::runtime_error(fmt::format("cannot change {}: {}{}", path_, std::strerror(errno),
                                         ::geteuid() != 0 ? " (run as root)" : ""));
  }
  if (active.exchange(true)) throw std::logic_error("sysctl_override: one at a time");
  std::memcpy(slot.path, path_.c_str(), path_.size() + 1);
  std::memcpy(slot.value, old_.data(), old_.size());
  slot.value_len = old_.size();
  restored = false;
  struct sigaction sa {};
  sa.sa_handler = restore_on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals)
    sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &sa, &slot.previous[i]);
  if (!write_value(path_.c_str(), value.data(), value.size())) {
    const int err = errno;
    for (std::size_t i = 0; i < kSignals.size(); ++i)
      ::sigaction(kSignals[i], &slot.previous[i], nullptr);
    active = false;
    throw std::runtime_error(
        fmt::format("cannot set {} to '{}': {}", path_, value, std::strerror(err)));
  }
}

sysctl_override::~sysctl_override() {
  if (!restored.exchange(true)) write_value(slot.path, slot.value, slot.value_len);
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &slot.previous[i], nullptr);
  active = false;
}

}  // namespace quiesce::cli
