// SPDX-License-Identifier: Apache-2.0
// write_file_atomically, write_output_file and read_file (quiesce/file_io.hpp).
#include "file_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>

#include "mutant.hpp"

namespace quiesce {

namespace mutant {
// write_output_file renames over a device or FIFO, as write_file_atomically does
inline constexpr bool output_replaces_streams = QUIESCE_MUTANT(OUTPUT_REPLACES_STREAMS);
}  // namespace mutant

namespace {

[[noreturn]] void fail(int err, const std::filesystem::path& path, const char* what) {
  throw std::system_error(err, std::generic_category(),
                          fmt::format("cannot write {}: {}", path.string(), what));
}

std::uint64_t random_suffix() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    // No entropy source: the name is only less unpredictable; O_EXCL still refuses a
    // planted file.
    v = static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
        reinterpret_cast<std::uintptr_t>(&v);
  }
  return v;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Whether `path` names a stream - neither a regular file nor a directory, after symlinks.
bool names_a_stream(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

// Writes `parts` into the stream `path` names. False, having written nothing, if what the
// open found is a regular file (the path changed after names_a_stream looked).
bool write_in_place(const std::filesystem::path& path,
                    std::initializer_list<std::string_view> parts) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) fail(errno, path, "cannot open it");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(err, path, "cannot look at it");
  }
  if (S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  for (std::string_view part : parts) {
    if (!write_all(fd, part)) {
      const int err = errno;
      ::close(fd);
      fail(err, path, "write failed");
    }
  }
  if (::close(fd) != 0) fail(errno, path, "close failed");
  return true;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path,
                           std::initializer_list<std::string_view> parts) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp =
        (dir / fmt::format(".{}.tmp-{:016x}", path.filename().string(), random_suffix())).string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100))
      fail(errno, path, "cannot create a temporary");
  }
  auto undo = [&](int err, const char* what) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(err, path, what);
  };
  for (std::string_view part : parts) {
    if (!write_all(fd, part)) undo(errno, "write failed");
  }
  if (::fsync(fd) != 0) undo(errno, "fsync failed");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(err, path, "close failed");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(err, path, "rename failed");
  }
}

void write_output_file(const std::filesystem::path& path,
                       std::initializer_list<std::string_view> parts) {
  if (!mutant::output_replaces_streams && names_a_stream(path) && write_in_place(path, parts))
    return;
  write_file_atomically(path, parts);
}

std::string read_file(const std::filesystem::path& path, std::size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("cannot read {}", path.string()));
  }
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw std::system_error(err, std::generic_category(),
                              fmt::format("cannot read {}", path.string()));
    }
    if (out.size() + static_cast<std::size_t>(n) > limit) {
      ::close(fd);
      throw std::system_error(
          EFBIG, std::generic_category(),
          fmt::format("cannot read {}: more than {} bytes", path.string(), limit));
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace quiesce
