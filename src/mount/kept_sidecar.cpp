// SPDX-License-Identifier: Apache-2.0
// What becomes of a verity file's sidecar when a name of the file goes away through the
// mount (unlink, or a rename over it): kept, under a hidden name in the same directory,
// while the file has other names that reach it through the inode record; removed with the
// file's last name (fs.hpp, "a name that goes away").
//
// The daemon renames or removes only what it recognised a moment before as the sidecar of
// the removed name (sidecar_of: a regular file, the data's owner's, recognised by content)
// or as the one the inode record points to, and only within the directory the caller just
// changed - as removing the sidecar beside an unlinked name always did.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"

namespace quiesce::mount::detail {

namespace {

constexpr const char* kept_prefix = ".quiesce-kept.";

bool same_inode(int fd, const struct stat& other) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_dev == other.st_dev && st.st_ino == other.st_ino;
}

// Whether the file removed under a name still has other names (st: fstat after the removal).
bool names_remain(const struct stat& st) {
  return st.st_nlink > 0;
}

}  // namespace

std::string kept_sidecar_name(ino_t data_ino) {
  return fmt::format("{}{}{}", kept_prefix, static_cast<unsigned long long>(data_ino),
                     sidecar_suffix);
}

bool is_kept_sidecar_name(const std::string& name) {
  const std::size_t p = std::strlen(kept_prefix);
  const std::size_t s = std::strlen(sidecar_suffix);
  if (name.size() <= p + s || name.compare(0, p, kept_prefix) != 0 || !has_sidecar_suffix(name)) {
    return false;
  }
  for (std::size_t i = p; i < name.size() - s; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

leaving_name before_name_removed(int dir_fd, const std::string& name) {
  leaving_name gone;
  fd_t data(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!data || ::fstat(data.get(), &st) != 0 || !S_ISREG(st.st_mode)) return gone;
  gone.data = std::move(data);
  if (auto side = sidecar_of(dir_fd, name)) gone.beside = std::move(side->second);
  return gone;
}

void after_name_removed(int dir_fd, const std::string& name, const leaving_name& gone) {
  if (!gone.data) return;
  struct stat st {};
  if (::fstat(gone.data.get(), &st) != 0) return;
  {
    // rename(2) over another name of the same file removes nothing.
    struct stat now {};
    if (::fstatat(dir_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
      return;
    }
  }
  const std::string side = name + sidecar_suffix;
  const std::string kept = kept_sidecar_name(st.st_ino);
  // The sidecar the file's other names reach (none without a record: then they cannot).
  const auto recorded = sidecar_by_record(gone.data.get(), st);
  struct stat recorded_st {};
  const bool has_recorded = recorded && ::fstat(recorded->second.get(), &recorded_st) == 0;
  if (names_remain(st)) {
    if (!gone.beside) return;  // a name without one: the sidecar lies beside another
    if (!mutant::unlink_drops_sidecar && has_recorded &&
        same_inode(gone.beside.get(), recorded_st)) {
      if (::renameat2(dir_fd, side.c_str(), dir_fd, kept.c_str(), RENAME_NOREPLACE) == 0) return;
      const int err = errno;
      // Kept already (the same sidecar, linked beside another name since), or the name is
      // taken by a file the daemon did not make: the file's other names lose their verity
      // only in the second case.
      struct stat there {};
      if (::fstatat(dir_fd, kept.c_str(), &there, AT_SYMLINK_NOFOLLOW) != 0 ||
          there.st_dev != recorded_st.st_dev || there.st_ino != recorded_st.st_ino) {
        log(log_level::warning,
            fmt::format("quiesce verity mount: cannot keep the sidecar of a removed name of "
                        "inode {} (its other names lose their verity): {}",
                        static_cast<unsigned long long>(st.st_ino), std::strerror(err)));
      }
    }
    ::unlinkat(dir_fd, side.c_str(), 0);
    return;
  }
  // The last name: the sidecar beside it, and a kept one here, go with the file.
  if (gone.beside) ::unlinkat(dir_fd, side.c_str(), 0);
  struct stat there {};
  if (has_recorded && ::fstatat(dir_fd, kept.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
      there.st_dev == recorded_st.st_dev && there.st_ino == recorded_st.st_ino) {
    ::unlinkat(dir_fd, kept.c_str(), 0);
  }
}

}  // namespace quiesce::mount::detail
