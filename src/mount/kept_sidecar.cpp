// SPDX-License-Identifier: Apache-2.0
// What becomes of a verity file's sidecar when a name of the file goes away through the
// mount (unlink, or a rename over it): kept, under a hidden name in the same directory,
// while the file has other names that reach it through the inode record; removed with the
// file's last name (fs.hpp, "a name that goes away").
//
// The daemon renames or removes only what it recognised a moment before as the sidecar of
// the removed name (sidecar_of: a regular file, the data's owner's, recognised by content)
// or as the one the inode record points to, and only within the directory the caller just
// changed - as removing the sidecar beside an unlinked name always did - or, at the file's
// last name, within the directory its sidecar was kept in, where that still lies within
// SOURCE (kept_directory).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"

namespace quiesce::mount::detail {

namespace {

// ".quiesce-kept." + 16 hex digits (random) + ".verity-kept": unpredictable, so that no user
// can take a kept sidecar's name before the daemon does; and not ending in ".verity", so that
// no data file's sidecar name is ever a kept sidecar's.
constexpr const char* kept_prefix = ".quiesce-kept.";
constexpr const char* kept_suffix = ".verity-kept";
constexpr std::size_t kept_digits = 16;

// Whether the file removed under a name still has other names (st: fstat after the removal).
bool names_remain(const struct stat& st) {
  return st.st_nlink > 0;
}

std::string new_kept_name() {
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  return fmt::format("{}{:016x}{}", kept_prefix, r, kept_suffix);
}

// Renames the sidecar `side` in `dir_fd` to a new kept name (never over an existing one).
bool keep(int dir_fd, const std::string& side) {
  for (int tries = 0; tries < 8; ++tries) {
    if (::renameat2(dir_fd, side.c_str(), dir_fd, new_kept_name().c_str(), RENAME_NOREPLACE) == 0) {
      return true;
    }
    if (errno != EEXIST) return false;
  }
  return false;
}

// Removes, in `dir_fd`, every kept name of the sidecar `sidecar` (its inode).
void drop_kept(int dir_fd, const struct stat& sidecar) {
  std::vector<std::string> names;
  for_each_entry(dir_fd, [&](const dirent& e) {
    if (is_kept_sidecar_name(e.d_name)) names.emplace_back(e.d_name);
  });
  for (const std::string& name : names) {
    if (name_holds(dir_fd, name, sidecar.st_dev, sidecar.st_ino)) {
      ::unlinkat(dir_fd, name.c_str(), 0);
    }
  }
}

// Whether the file's other names reach the sidecar beside the removed name through the
// inode record: it points there - or it resolves to nothing (its sidecar replaced by a copy
// in SOURCE since, or no record yet) and is written now to point there.
bool reached_by_record(const leaving_name& gone, bool has_recorded, const struct stat& recorded) {
  if (has_recorded) return fd_holds(gone.beside.get(), recorded.st_dev, recorded.st_ino);
  if (mutant::record_not_repaired) return false;
  const fd_t data(
      ::open(proc_path(gone.data.get()).c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  return data && record_verity_on_inode(data.get(), gone.beside.get());
}

}  // namespace

bool is_kept_sidecar_name(const std::string& name) {
  const std::size_t p = std::strlen(kept_prefix);
  const std::size_t s = std::strlen(kept_suffix);
  if (name.size() != p + kept_digits + s || name.compare(0, p, kept_prefix) != 0 ||
      name.compare(p + kept_digits, s, kept_suffix) != 0) {
    return false;
  }
  for (std::size_t i = p; i < p + kept_digits; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
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

void after_name_removed(int dir_fd, const std::string& name, const leaving_name& gone,
                        int root_fd) {
  if (!gone.data) return;
  struct stat st {};
  if (::fstat(gone.data.get(), &st) != 0) return;
  // rename(2) over another name of the same file removes nothing.
  if (name_holds(dir_fd, name, st.st_dev, st.st_ino)) return;
  const std::string side = name + sidecar_suffix;
  if (names_remain(st) && !gone.beside) return;  // the sidecar lies beside another name
  // The sidecar the file's other names reach (none without a record: then they cannot).
  const auto recorded = sidecar_by_record(gone.data.get(), st);
  struct stat recorded_st {};
  const bool has_recorded = recorded && ::fstat(recorded->second.get(), &recorded_st) == 0;
  if (names_remain(st)) {
    if (!mutant::unlink_drops_sidecar && reached_by_record(gone, has_recorded, recorded_st)) {
      if (keep(dir_fd, side)) {
        // (The mutant is preempted here, as a daemon thread may be: the window in which the
        // file's last other name goes before the note below can be found. Without the pause
        // its kill depended on two CPUs free for the racing unlinks.)
        if (mutant::keeper_not_rechecked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        struct stat kept {};
        if (!note_kept_directory(gone.data.get(), dir_fd)) {
          log(log_level::warning,
              fmt::format("quiesce verity mount: cannot record where the sidecar of inode {} "
                          "was kept (it stays there after the file's last name): {}",
                          static_cast<unsigned long long>(st.st_ino), std::strerror(errno)));
        }
        // The file's last other name may have gone meanwhile, before the note above could
        // be found: then the kept sidecar goes now.
        if (!mutant::keeper_not_rechecked && ::fstat(gone.data.get(), &st) == 0 &&
            !names_remain(st) && ::fstat(gone.beside.get(), &kept) == 0) {
          drop_kept(dir_fd, kept);
        }
        return;
      }
      log(log_level::warning,
          fmt::format("quiesce verity mount: cannot keep the sidecar of a removed name of "
                      "inode {} (its other names lose their verity): {}",
                      static_cast<unsigned long long>(st.st_ino), std::strerror(errno)));
    }
    ::unlinkat(dir_fd, side.c_str(), 0);
    return;
  }
  // The last name: the sidecar beside it, and its kept names here, go with the file.
  if (gone.beside) ::unlinkat(dir_fd, side.c_str(), 0);
  if (has_recorded) {
    drop_kept(dir_fd, recorded_st);
    if (const fd_t elsewhere = kept_directory(gone.data.get(), root_fd)) {
      drop_kept(elsewhere.get(), recorded_st);
    }
  }
}

}  // namespace quiesce::mount::detail
