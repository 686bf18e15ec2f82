// SPDX-License-Identifier: Apache-2.0
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
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "../base/mutant.hpp"
#include "../base/mutex.hpp"

namespace quiesce::host {

namespace mutant {
// a busy filesystem stays mounted: no lazy detach after umount2 fails EBUSY
inline constexpr bool unmount_never_detaches = QUIESCE_MUTANT(HOST_UNMOUNT_NEVER_DETACHES);
}  // namespace mutant

namespace {

constexpr std::array cleanup_signals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

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

constexpr int max_actions = 8;
slot slots[max_actions];
std::atomic<std::uint64_t> next_order{1};  // A

// Installing and restoring the handlers: under handlers_lock, counted by armed slots.
quiesce::detail::mutex handlers_lock{"exit_cleanup handlers_lock"};
int handlers_users QUIESCE_GUARDED_BY(handlers_lock) = 0;
struct sigaction previous[cleanup_signals.size()] QUIESCE_GUARDED_BY(handlers_lock);

bool write_value(const char* path, const char* value, std::size_t len) noexcept {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, value, len) == static_cast<ssize_t>(len);
  return ::close(fd) == 0 && ok;
}

// Async-signal-safe: calls `fn(name)` for each entry of the open directory `fd` but "."
// and ".."; `fn` returns true if it removed the entry, and the directory is then read again
// from its start (the entries moved).
template <class Fn>
void for_each_entry(int fd, Fn fn) noexcept {
  alignas(8) char buf[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) return;
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
      if (fn(e->name)) removed_any = true;
    }
    if (removed_any) ::lseek(fd, 0, SEEK_SET);
  }
}

// Async-signal-safe: unlinkat over the directory's own entries, then rmdir.
bool remove_dir_now(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    for_each_entry(fd, [fd](const char* name) { return ::unlinkat(fd, name, 0) == 0; });
    ::close(fd);
  }
  return ::rmdir(path) == 0;
}

// Whether `file` is `dir` or lies under it.
bool is_under(const char* file, const char* dir) noexcept {
  const std::size_t n = std::strlen(dir);
  return std::strncmp(file, dir, n) == 0 && (file[n] == '\0' || file[n] == '/');
}

// Async-signal-safe, for the signal handler: points every descriptor of this process that
// is open on a file under `dir` at /dev/null instead (dup2), so none keeps `dir` busy - a
// tracefs instance whose trace_pipe_raw libtracefs is reading cannot be removed, nor its
// tracefs unmounted (EBUSY). The descriptor numbers stay valid, so a thread still using one
// reads end-of-file rather than EBADF or, worse, a file opened later under the same number.
void release_descriptors_under(const char* dir) noexcept {
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const int fds = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (null_fd >= 0 && fds >= 0) {
    for_each_entry(fds, [&](const char* name) {
      int fd = 0;
      for (const char* c = name; *c; ++c) {
        if (*c < '0' || *c > '9') return false;
        fd = fd * 10 + (*c - '0');
      }
      if (fd == fds || fd == null_fd) return false;
      char target[sizeof slots[0].path + 1];
      const ssize_t len = ::readlinkat(fds, name, target, sizeof target - 1);
      if (len <= 0) return false;
      target[len] = '\0';
      if (is_under(target, dir)) ::dup3(null_fd, fd, 0);
      return false;  // the directory's entries do not move
    });
  }
  if (fds >= 0) ::close(fds);
  if (null_fd >= 0) ::close(null_fd);
}

// Async-signal-safe: unmounts `path`; where its filesystem is still busy - a thread of ours
// opened a file under it again after the handler released the others (libtracefs' readers
// open trace files as they go) - detaches it instead: the mount leaves the mount table now,
// and the filesystem goes when its last descriptor closes (for a process dying of a signal,
// at once). A plain umount first, so that a filesystem nothing holds is gone on return.
bool unmount_now(const char* path) noexcept {
  if (::umount2(path, 0) == 0) return true;
  return errno == EBUSY && !mutant::unmount_never_detaches && ::umount2(path, MNT_DETACH) == 0;
}

// `in_handler`: the process is dying of a signal, so descriptors this process still has
// open under a directory to remove or unmount are released first.
bool run_slot(slot& s, bool in_handler) noexcept {
  int expected = armed;
  if (!s.state.compare_exchange_strong(expected, done)) return false;
  if (in_handler && (s.what == kind::remove_empty_dir || s.what == kind::unmount)) {
    release_descriptors_under(s.path);
  }
  switch (s.what) {
    case kind::restore_file:
      return write_value(s.path, s.value, s.value_len);
    case kind::remove_dir:
      return remove_dir_now(s.path);
    case kind::remove_empty_dir:
      return ::rmdir(s.path) == 0;
    case kind::unmount:
      return unmount_now(s.path);
  }
  return false;
}

// Async-signal-safe: appends `text` to `buf` (NUL-terminated, `size` bytes in all).
void append(char* buf, std::size_t size, const char* text) noexcept {
  std::size_t at = std::strlen(buf);
  while (*text && at + 1 < size)
    buf[at++] = *text++;
  buf[at] = '\0';
}

// Async-signal-safe: says on stderr which action failed and errno's number (strerror is not
// safe here): "quiesce: on signal: could not unmount /sys/kernel/tracing (errno 16)".
void report_failure(const slot& s, int err) noexcept {
  static constexpr const char* verbs[] = {"restore", "remove", "remove", "unmount"};
  char line[sizeof s.path + 96] = "quiesce: on signal: could not ";
  append(line, sizeof line, verbs[static_cast<int>(s.what)]);
  append(line, sizeof line, " ");
  append(line, sizeof line, s.path);
  char num[16] = {};
  int n = 0;
  for (unsigned v = static_cast<unsigned>(err); n == 0 || v > 0; v /= 10)
    num[n++] = static_cast<char>('0' + v % 10);
  char digits[16] = {};
  for (int i = 0; i < n; ++i)
    digits[i] = num[n - 1 - i];
  append(line, sizeof line, " (errno ");
  append(line, sizeof line, digits);
  append(line, sizeof line, ")\n");
  (void)!::write(STDERR_FILENO, line, std::strlen(line));
}

void on_signal(int sig) {
  const int saved_errno = errno;  // a handler leaves errno as it found it (TSan checks)
  // Newest first: a later action may depend on an earlier one still being in place.
  for (;;) {
    slot* newest = nullptr;
    for (slot& s : slots) {
      if (s.state.load() == armed && (!newest || s.order > newest->order)) newest = &s;
    }
    if (!newest) break;
    errno = 0;  // a slot its owner ran meanwhile fails without a system call
    if (!run_slot(*newest, true) && errno != 0) report_failure(*newest, errno);
  }
  ::signal(sig, SIG_DFL);  // die of the signal as the process would have without us
  ::raise(sig);            // delivered once the handler returns (it is blocked until then)
  errno = saved_errno;
}

void install_handlers() {
  quiesce::detail::lock_guard guard(handlers_lock);
  if (handlers_users++ > 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : cleanup_signals)
    sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (std::size_t i = 0; i < cleanup_signals.size(); ++i)
    ::sigaction(cleanup_signals[i], &sa, &previous[i]);
}

void remove_handlers() {
  quiesce::detail::lock_guard guard(handlers_lock);
  if (--handlers_users > 0) return;
  for (std::size_t i = 0; i < cleanup_signals.size(); ++i)
    ::sigaction(cleanup_signals[i], &previous[i], nullptr);
}

int claim(kind what, const std::string& path, const std::string& value) {
  if (path.size() >= sizeof slots[0].path || value.size() > sizeof slots[0].value) {
    throw std::runtime_error(fmt::format("{}: path or value too long to restore on exit", path));
  }
  for (int i = 0; i < max_actions; ++i) {
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
  return slot_ >= 0 && run_slot(slots[slot_], false);
}

exit_cleanup::~exit_cleanup() {
  if (slot_ < 0) return;
  run_slot(slots[slot_], false);
  remove_handlers();
  slots[slot_].state.store(free_slot);
}

}  // namespace quiesce::host
