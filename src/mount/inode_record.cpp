// SPDX-License-Identifier: Apache-2.0
// The inode record: what an enable leaves on the file's own inode - the extended attribute
// trusted.quiesce.verity, holding a file handle (name_to_handle_at) of its sidecar - so that
// every name of the inode is a verity file to any mount, a fresh one included: a hard link
// made in SOURCE has no sidecar beside its name, but the inode it names carries the record.
//
// Why this is safe to trust: trusted.* attributes are set and read only with CAP_SYS_ADMIN,
// which a user never has through the mount (every operation runs as the caller with no
// capability in effect) nor in SOURCE without being root. And the record only ever makes a
// file stricter: what it points to must still pass the checks a sidecar found by name
// passes (a regular file on the data's filesystem, owned by the data's owner, recognised
// by its content), else the record is ignored and the file is as it would be without it.
// Decoding a handle needs CAP_DAC_READ_SEARCH: a daemon that is not root ignores records.
//
// Written by an enable (through the mount, or `quiesce verity enable` as root), and by a
// lookup that finds a sidecar beside a name where the inode has no record of it - a file
// enabled before records existed, or whose sidecar was put there by hand - so that its
// other names are verity files to every mount once any mount has seen it by that name.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/mount/verity_fs.hpp"

namespace quiesce::mount {

namespace {

constexpr const char* record_xattr = "trusted.quiesce.verity";
// Where the sidecar the record points to was kept (kept_sidecar.cpp): a handle of its
// directory, in the record's encoding, so that the file's last name removes it from there.
constexpr const char* kept_in_xattr = "trusted.quiesce.kept-in";
constexpr char record_magic[8] = {'q', 'v', 'r', 'e', 'c', 'o', 'r', '1'};
constexpr unsigned max_handle_bytes = 128;  // MAX_HANDLE_SZ

// magic, handle_type (int32), handle_bytes (uint32), the handle's bytes.
struct record_head {
  char magic[8];
  std::int32_t handle_type;
  std::uint32_t handle_bytes;
};

}  // namespace

namespace detail {

namespace {

// The record's value for the sidecar `sidecar_fd` (magic, type, length, the handle); empty
// where its filesystem gives no handle.
std::vector<unsigned char> record_value(int sidecar_fd) {
  std::vector<unsigned char> storage(sizeof(file_handle) + max_handle_bytes);
  auto* fh = reinterpret_cast<file_handle*>(storage.data());
  fh->handle_bytes = max_handle_bytes;
  int mount_id = 0;
  if (::name_to_handle_at(sidecar_fd, "", fh, &mount_id, AT_EMPTY_PATH) != 0) return {};
  record_head head{};
  std::memcpy(head.magic, record_magic, sizeof head.magic);
  head.handle_type = fh->handle_type;
  head.handle_bytes = fh->handle_bytes;
  std::vector<unsigned char> value(sizeof head + fh->handle_bytes);
  std::memcpy(value.data(), &head, sizeof head);
  std::memcpy(value.data() + sizeof head, fh->f_handle, fh->handle_bytes);
  return value;
}

// Writes `value` as the record of the file `data_fd` (open for reading), if the data's
// filesystem can decode its handle: overlayfs, for one, may give handles it cannot open,
// and a record a lookup could not follow would promise what it cannot keep.
bool write_record(int data_fd, const std::vector<unsigned char>& value) {
  record_head head{};
  std::memcpy(&head, value.data(), sizeof head);
  std::vector<unsigned char> storage(sizeof(file_handle) + head.handle_bytes);
  auto* fh = reinterpret_cast<file_handle*>(storage.data());
  fh->handle_bytes = head.handle_bytes;
  fh->handle_type = head.handle_type;
  std::memcpy(fh->f_handle, value.data() + sizeof head, head.handle_bytes);
  if (const fd_t back(::open_by_handle_at(data_fd, fh, O_PATH | O_CLOEXEC)); !back) return false;
  return ::setxattr(proc_path(data_fd).c_str(), record_xattr, value.data(), value.size(), 0) == 0;
}

}  // namespace

bool can_keep_inode_record(int path_fd) {
  const std::string path = proc_path(path_fd);
  unsigned char held[sizeof(record_head) + max_handle_bytes];
  if (::getxattr(path.c_str(), record_xattr, held, sizeof held) < 0 && errno != ENODATA &&
      errno != ERANGE) {
    return false;  // no trusted.* attributes here
  }
  // A handle of the file itself, decoded again: a record's handle would be one of the same
  // filesystem (the sidecar lies in the same directory).
  std::vector<unsigned char> storage(sizeof(file_handle) + max_handle_bytes);
  auto* fh = reinterpret_cast<file_handle*>(storage.data());
  fh->handle_bytes = max_handle_bytes;
  int mount_id = 0;
  if (::name_to_handle_at(path_fd, "", fh, &mount_id, AT_EMPTY_PATH) != 0) return false;
  const fd_t anchor(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  return anchor && fd_t(::open_by_handle_at(anchor.get(), fh, O_PATH | O_CLOEXEC));
}

bool record_verity_on_inode(int data_fd, int sidecar_fd) {
  const std::vector<unsigned char> value = record_value(sidecar_fd);
  return !value.empty() && write_record(data_fd, value);
}

void keep_inode_record(int path_fd, int sidecar_fd) {
  if constexpr (mutant::record_only_on_enable) return;
  const std::vector<unsigned char> value = record_value(sidecar_fd);
  if (value.empty()) return;
  const std::string path = proc_path(path_fd);
  unsigned char held[sizeof(record_head) + max_handle_bytes];
  const ssize_t n = ::getxattr(path.c_str(), record_xattr, held, sizeof held);
  if (n < 0 && errno != ENODATA && errno != ERANGE) return;  // no attributes here, or not root
  if (n == static_cast<ssize_t>(value.size()) && std::memcmp(held, value.data(), n) == 0) return;
  const fd_t data(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (data) (void)write_record(data.get(), value);
}

namespace {

// The handle the attribute `xattr` of the regular file `path_fd` holds (in the record's
// encoding), decoded as an O_PATH descriptor; none where there is no such attribute, it is
// malformed, or its inode is gone (ESTALE) or cannot be decoded (no CAP_DAC_READ_SEARCH).
fd_t decode_handle_attribute(int path_fd, const char* xattr) {
  const std::string path = proc_path(path_fd);
  unsigned char value[sizeof(record_head) + max_handle_bytes];
  const ssize_t n = ::getxattr(path.c_str(), xattr, value, sizeof value);
  if (n < static_cast<ssize_t>(sizeof(record_head))) return {};  // none (ENODATA)
  record_head head{};
  std::memcpy(&head, value, sizeof head);
  if (std::memcmp(head.magic, record_magic, sizeof head.magic) != 0 ||
      head.handle_bytes > max_handle_bytes ||
      static_cast<std::size_t>(n) != sizeof head + head.handle_bytes) {
    return {};
  }
  std::vector<unsigned char> storage(sizeof(file_handle) + head.handle_bytes);
  auto* fh = reinterpret_cast<file_handle*>(storage.data());
  fh->handle_bytes = head.handle_bytes;
  fh->handle_type = head.handle_type;
  std::memcpy(fh->f_handle, value + sizeof head, head.handle_bytes);
  // The handle is decoded on the data's own filesystem (an O_PATH descriptor is not taken
  // as mount_fd): the data itself, a regular file, opened for reading only.
  const fd_t anchor(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!anchor) return {};
  return fd_t(::open_by_handle_at(anchor.get(), fh, O_PATH | O_CLOEXEC));
}

// Whether the directory `dir_fd` lies within the directory `root_fd` (itself, or below it
// on the same filesystem): its ancestors reach root before the filesystem's own root.
bool within(int dir_fd, int root_fd) {
  struct stat root {};
  struct stat here {};
  if (::fstat(root_fd, &root) != 0 || ::fstat(dir_fd, &here) != 0) return false;
  fd_t cur(::openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  for (int depth = 0; cur && depth < 4096; ++depth) {
    if (is_inode(here, root.st_dev, root.st_ino)) return true;
    fd_t up(::openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct stat above {};
    if (!up || ::fstat(up.get(), &above) != 0 || above.st_dev != root.st_dev ||
        is_inode(above, here.st_dev, here.st_ino)) {
      return false;  // another filesystem, or its root: outside
    }
    cur = std::move(up);
    here = above;
  }
  return false;
}

}  // namespace

bool note_kept_directory(int path_fd, int dir_fd) {
  const std::vector<unsigned char> value = record_value(dir_fd);
  return !value.empty() &&
         ::setxattr(proc_path(path_fd).c_str(), kept_in_xattr, value.data(), value.size(), 0) == 0;
}

fd_t kept_directory(int path_fd, int root_fd) {
  if constexpr (mutant::kept_left_elsewhere) return {};
  fd_t dir = decode_handle_attribute(path_fd, kept_in_xattr);
  struct stat st {};
  if (!dir || ::fstat(dir.get(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      (!mutant::kept_followed_outside && !within(dir.get(), root_fd))) {
    return {};
  }
  return dir;
}

std::optional<std::pair<descriptor, fd_t>> sidecar_by_record(int path_fd, const struct stat& data) {
  if constexpr (mutant::no_inode_record) return std::nullopt;
  if (!S_ISREG(data.st_mode)) return std::nullopt;
  const fd_t side = decode_handle_attribute(path_fd, record_xattr);
  if (!side) return std::nullopt;  // gone (ESTALE), or no CAP_DAC_READ_SEARCH
  struct stat st {};
  // Unlinked (nlink 0: held open, by this daemon perhaps) it was removed, and with it the
  // file's verity, as removing the sidecar beside the name does.
  if (::fstat(side.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink == 0 ||
      st.st_dev != data.st_dev || st.st_uid != data.st_uid) {
    return std::nullopt;
  }
  return open_sidecar(side.get());
}

}  // namespace detail

bool record_verity_on_inode(const std::filesystem::path& file,
                            const std::filesystem::path& sidecar) {
  const detail::fd_t data(
      ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
  const detail::fd_t side(::open(sidecar.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  return data && side && detail::record_verity_on_inode(data.get(), side.get());
}

}  // namespace quiesce::mount
