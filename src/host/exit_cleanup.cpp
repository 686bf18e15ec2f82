// exit_cleanup (exit_cleanup.hpp): a fixed table of prepared actions and the signal
// handler that runs them.
#include "quiesce/host/exit_cleanup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace quiesce::host {

namespace {

constexpr std::array kSignals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

enum class kind : int { restore_file, remove_dir, remove_empty_dir, unmount };

// Slot states (A): free -> claimed (fields being written) -> armed -> done (ran) -> free.
enum : int { free_slot = 0, claimed = 1, armed = 2, done = 3 };

struct slot {
  std::atomic<int> state{free_slot};
  std::uint64_t order = 0;  // registration order: the handler runs the newest first
  kind what = kind::restore_file;
  char path[512] = {};
  char value[128] = {};
  std::size_t value_len = 0;
};

constexpr int kSlots = 8;
slot slots[kSlots];
std::atomic<std::uint64_t> next_order{1};  // A

// Installing and restoring the handlers: under handlers_lock, counted by armed slots.
std::mutex handlers_lock;
int handlers_users = 0;                      // L: handlers_lock
struct sigaction previous[kSignals.size()];  // L: handlers_lock

bool write_value(const char* path, const char* value, std::size_t len) noexcept {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, value, len) == static_cast<ssize_t>(len);
  return ::close(fd) == 0 && ok;
}

// Async-signal-safe: getdents64 and unlinkat over the directory's own entries, then rmdir.
bool remove_dir_now(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      bool removed_any = false;
      for (long off = 0; off < n;) {
        struct entry {
          std::uint64_t ino;
          std::int64_t off;
          unsigned short reclen;
          unsigned char type;
          char name[1];
        };
        const auto* e = reinterpret_cast<const entry*>(buf + off);
        off += e->reclen;
        if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) continue;
        if (::unlinkat(fd, e->name, 0) == 0) removed_any = true;
      }
      if (removed_any) ::lseek(fd, 0, SEEK_SET);  // entries moved: read from the start again
    }
    ::close(fd);
  }
  return ::rmdir(path) == 0;
}

bool run_slot(slot& s) noexcept {
  int expected = armed;
  if (!s.state.compare_exchange_strong(expected, done)) return false;
  switch (s.what) {
    case kind::restore_file:
      return write_value(s.path, s.value, s.value_len);
    case kind::remove_dir:
      return remove_dir_now(s.path);
    case kind::remove_empty_dir:
      return ::rmdir(s.path) == 0;
    case kind::unmount:
      return ::umount2(s.path, 0) == 0;
  }
  return false;
}

void on_signal(int sig) {
  // The process is about to die: close every descriptor but stdin/out/err first, so none
  // of ours keeps a directory busy (a tracefs instance whose trace_pipe_raw is being read
  // cannot be removed, nor its tracefs unmounted: EBUSY).
  ::syscall(SYS_close_range, 3u, ~0u, 0u);
  // Newest first: a later action may depend on an earlier one still being in place.
  for (;;) {
    slot* newest = nullptr;
    for (slot& s : slots) {
      if (s.state.load() == armed && (!newest || s.order > newest->order)) newest = &s;
    }
    if (!newest) break;
    run_slot(*newest);
  }
  ::signal(sig, SIG_DFL);  // die of the signal as the process would have without us
  ::raise(sig);
}

void install_handlers() {
  std::lock_guard guard(handlers_lock);
  if (handlers_users++ > 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals)
    sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &sa, &previous[i]);
}

void remove_handlers() {
  std::lock_guard guard(handlers_lock);
  if (--handlers_users > 0) return;
  for (std::size_t i = 0; i < kSignals.size(); ++i)
    ::sigaction(kSignals[i], &previous[i], nullptr);
}

int claim(kind what, const std::string& path, const std::string& value) {
  if (path.size() >= sizeof slots[0].path || value.size() > sizeof slots[0].value) {
    throw std::runtime_error(fmt::format("{}: path or value too long to restore on exit", path));
  }
  for (int i = 0; i < kSlots; ++i) {
    int expected = free_slot;
    if (!slots[i].state.compare_exchange_strong(expected, claimed)) continue;
    slot& s = slots[i];
    s.what = what;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    std::memcpy(s.value, value.data(), value.size());
    s.value_len = value.size();
    s.order = next_order.fetch_add(1);
    install_handlers();
    s.state.store(armed);
    return i;
  }
  throw std::runtime_error(fmt::format("{}: too many exit actions at once", path));
}

}  // namespace

exit_cleanup exit_cleanup::restore_file(const std::string& path, const std::string& value) {
  return exit_cleanup(claim(kind::restore_file, path, value));
}

exit_cleanup exit_cleanup::remove_dir(const std::string& path) {
  return exit_cleanup(claim(kind::remove_dir, std::filesystem::absolute(path).string(), ""));
}

exit_cleanup exit_cleanup::remove_empty_dir(const std::string& path) {
  return exit_cleanup(claim(kind::remove_empty_dir, path, ""));
}

exit_cleanup exit_cleanup::unmount(const std::string& path) {
  return exit_cleanup(claim(kind::unmount, path, ""));
}

exit_cleanup::exit_cleanup(exit_cleanup&& other) noexcept : slot_(other.slot_) {
  other.slot_ = -1;
}

bool exit_cleanup::run_now() noexcept {
  return slot_ >= 0 && run_slot(slots[slot_]);
}

exit_cleanup::~exit_cleanup() {
  if (slot_ < 0) return;
  run_slot(slots[slot_]);
  remove_handlers();
  slots[slot_].state.store(free_slot);
}

}  // namespace quiesce::host
