// SPDX-License-Identifier: Apache-2.0
// The namespace operations of `quiesce verity mount` (fs.hpp): lookup, attributes, links,
// directories, renames and extended attributes - each relative to a held descriptor, as the
// caller, with a verity file's sidecar kept beside every name of it.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "fs.hpp"
#include "quiesce/log.hpp"

namespace quiesce::mount::detail {

namespace {

void reply_err(fuse_req_t req, int err) {
  fuse_reply_err(req, err);
}

int stat_of(const node& n, struct stat& st) {
  return ::fstatat(n.fd(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

// Replies with the entry of `name` just made in `parent` (mknod, mkdir, symlink, link).
void reply_new_entry(fuse_req_t req, filesystem& f, const std::shared_ptr<node>& parent,
                     const char* name) {
  std::shared_ptr<node> n;
  struct stat st {};
  if (const int err = f.lookup(parent, name, n, st)) return reply_err(req, err);
  const fuse_entry_param e = entry_of(*n, st);
  fuse_reply_entry(req, &e);
}

// A name a new entry may not take: an existing sidecar.
bool reserved(const node& dir, const char* name) {
  return is_hidden(dir.fd(), name);
}

// A sidecar left by a file removed behind the mount's back, where a new file takes its
// name: removed, so that the new file is not taken for a verity file.
void remove_orphan_sidecar(const node& dir, const std::string& name) {
  if (sidecar_of(dir.fd(), name)) ::unlinkat(dir.fd(), (name + sidecar_suffix).c_str(), 0);
}

}  // namespace

fuse_entry_param entry_of(const node& n, const struct stat& st) {
  fuse_entry_param e{};
  e.ino = n.id;
  e.attr = st;
  e.attr_timeout = attr_timeout;
  e.entry_timeout = attr_timeout;
  return e;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  reply_new_entry(req, f, dir, name);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, std::uint64_t n) {
  fs_of(req).forget(ino, n);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, std::size_t count, fuse_forget_data* forgets) {
  for (std::size_t i = 0; i < count; ++i)
    fs_of(req).forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  struct stat st {};
  if (const int err = stat_of(*n, st)) return reply_err(req, err);
  fuse_reply_attr(req, &st, attr_timeout);
}

namespace {

// The set-user-ID and set-group-ID bits a mode change from `now` to `want` only takes away
// (0 if it changes anything else, or nothing).
mode_t setid_bits_dropped(mode_t now, mode_t want) {
  now &= 07777;
  want &= 07777;
  const mode_t dropped = now & ~want;
  return (want & ~now) == 0 && dropped != 0 && (dropped & ~(S_ISUID | S_ISGID)) == 0 ? dropped : 0;
}

}  // namespace

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto n = f.node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  const auto* h = fi ? reinterpret_cast<const handle*>(fi->fh) : nullptr;
  const bool symlink = S_ISLNK(n->type);
  const std::string path = proc_path(n->fd());
  std::optional<as_caller> who(std::in_place, req);
  // The kernel's kill-priv: a write or truncation by someone who may write the file but
  // does not own it clears its set-ID bits with the kernel's own authority (ATTR_FORCE:
  // FUSE sends it as this mode change). As the caller it would fail (EPERM: not the
  // owner), and with it the write - so a change that only drops set-ID bits, asked by a
  // caller who may write the file, is made with the daemon's authority, below.
  mode_t drop_setid = 0;
  if (to_set & FUSE_SET_ATTR_MODE) {
    if (symlink) return reply_err(req, EOPNOTSUPP);
    if (::fchmodat(AT_FDCWD, path.c_str(), attr->st_mode & 07777, 0) != 0) {
      const int err = errno;
      struct stat now {};
      if (err == EPERM && stat_of(*n, now) == 0)
        drop_setid = setid_bits_dropped(now.st_mode, attr->st_mode);
      if (drop_setid == 0 || who->may_write(n->fd()) != 0) return reply_err(req, err);
    }
  }
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    const uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    const gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    if (::fchownat(n->fd(), "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
      return reply_err(req, errno);
    }
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (!n->is_reg()) return reply_err(req, n->is_dir() ? EISDIR : EINVAL);
    identity& id = *n->who;
    {
      // A verity file's size never changes (the kernel: EPERM); nor a file being enabled.
      quiesce::detail::lock_guard v(id.lock);
      if (id.desc) return reply_err(req, EPERM);
      if (id.enabling) return reply_err(req, ETXTBSY);
      ++id.writers;
    }
    int rc = 0;
    if (h && h->writable) {
      rc = ::ftruncate(h->fd.get(), attr->st_size);
    } else {
      fd_t w(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      rc = w ? ::ftruncate(w.get(), attr->st_size) : -1;
    }
    const int err = rc == 0 ? 0 : errno;
    {
      quiesce::detail::lock_guard v(id.lock);
      --id.writers;
    }
    if (err) return reply_err(req, err);
  }
  if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
    timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
      ts[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME)
      ts[0] = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
      ts[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME)
      ts[1] = attr->st_mtim;
    int rc;
    if (h) {
      rc = ::futimens(h->fd.get(), ts);
    } else if (symlink) {
      rc = ::utimensat(n->fd(), "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    } else {
      rc = ::utimensat(AT_FDCWD, path.c_str(), ts, 0);
    }
    if (rc != 0) return reply_err(req, errno);
  }
  if (drop_setid != 0) {
    // Not atomic with the owner's chmod as the kernel's (both under the inode lock): a
    // chmod between this stat and the change is overwritten with the mode read here,
    // less the set-ID bits. User space has no compare-and-set for a mode; the window is
    // two system calls wide, and only a write to a set-ID file opens it.
    who.reset();  // the daemon's own authority from here
    struct stat now {};
    if (const int err = stat_of(*n, now)) return reply_err(req, err);
    if (::fchmodat(AT_FDCWD, path.c_str(), now.st_mode & 07777 & ~drop_setid, 0) != 0) {
      return reply_err(req, errno);
    }
  }
  struct stat st {};
  if (const int err = stat_of(*n, st)) return reply_err(req, err);
  fuse_reply_attr(req, &st, attr_timeout);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  std::vector<char> buf(PATH_MAX + 1);
  const ssize_t len = ::readlinkat(n->fd(), "", buf.data(), PATH_MAX);
  if (len < 0) return reply_err(req, errno);
  buf[static_cast<std::size_t>(len)] = '\0';
  fuse_reply_readlink(req, buf.data());
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  if (reserved(*dir, name)) return reply_err(req, EEXIST);
  {
    as_caller who(req);
    if (::mknodat(dir->fd(), name, mode, rdev) != 0) return reply_err(req, errno);
  }
  if (S_ISREG(mode)) remove_orphan_sidecar(*dir, name);
  reply_new_entry(req, f, dir, name);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  if (reserved(*dir, name)) return reply_err(req, EEXIST);
  {
    as_caller who(req);
    if (::mkdirat(dir->fd(), name, mode) != 0) return reply_err(req, errno);
  }
  reply_new_entry(req, f, dir, name);
}

void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  if (reserved(*dir, name)) return reply_err(req, EEXIST);
  {
    as_caller who(req);
    if (::symlinkat(link, dir->fd(), name) != 0) return reply_err(req, errno);
  }
  reply_new_entry(req, f, dir, name);
}

// A new name for an inode; a verity file's sidecar gets the same new name, so that the
// new name is a verity file too (verity belongs to the inode).
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  filesystem& f = fs_of(req);
  const auto n = f.node_of(ino);
  const auto dir = f.node_of(newparent);
  if (!n || !dir) return reply_err(req, ESTALE);
  if (reserved(*dir, newname)) return reply_err(req, EEXIST);
  const std::string side = std::string(newname) + sidecar_suffix;
  fd_t sidecar;
  {
    quiesce::detail::lock_guard v(n->who->lock);
    if (n->who->enabling) return reply_err(req, EBUSY);
    if (n->who->desc) {
      sidecar = fd_t(::fcntl(n->who->sidecar.get(), F_DUPFD_CLOEXEC, 0));
      if (!sidecar) return reply_err(req, errno);
    }
  }
  if (sidecar) {
    // The sidecar's name must be free: a file of that name would be lost, or the link left
    // without its verity.
    struct stat st {};
    if (::fstatat(dir->fd(), side.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return reply_err(req, EEXIST);
    }
  }
  {
    as_caller who(req);
    if (::linkat(AT_FDCWD, proc_path(n->fd()).c_str(), dir->fd(), newname, AT_SYMLINK_FOLLOW) !=
        0) {
      return reply_err(req, errno);
    }
  }
  if (sidecar && ::linkat(AT_FDCWD, proc_path(sidecar.get()).c_str(), dir->fd(), side.c_str(),
                          AT_SYMLINK_FOLLOW) != 0) {
    log(log_level::warning, fmt::format("quiesce verity mount: link: the new name's sidecar: {}",
                                        std::strerror(errno)));
  }
  reply_new_entry(req, f, dir, newname);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  if (is_hidden(dir->fd(), name)) return reply_err(req, ENOENT);
  const leaving_name gone = before_name_removed(dir->fd(), name);
  {
    as_caller who(req);
    if (::unlinkat(dir->fd(), name, 0) != 0) return reply_err(req, errno);
  }
  // Its fs-verity metadata goes with the name, or is kept for the file's other names.
  after_name_removed(dir->fd(), name, gone, f.root_fd());
  fuse_reply_err(req, 0);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return reply_err(req, ESTALE);
  if (is_hidden(dir->fd(), name)) return reply_err(req, ENOENT);
  as_caller who(req);
  fuse_reply_err(req, ::unlinkat(dir->fd(), name, AT_REMOVEDIR) == 0 ? 0 : errno);
}

// rename(2) and renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE, as the source filesystem
// has them. Sidecars follow their files: moved with them, or removed with a file replaced.
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned flags) {
  filesystem& f = fs_of(req);
  const auto from = f.node_of(parent);
  const auto to = f.node_of(newparent);
  if (!from || !to) return reply_err(req, ESTALE);
  if (is_hidden(from->fd(), name)) return reply_err(req, ENOENT);
  if (is_hidden(to->fd(), newname)) return reply_err(req, EPERM);
  const std::string src_side = std::string(name) + sidecar_suffix;
  const std::string dst_side = std::string(newname) + sidecar_suffix;
  const bool src_verity = sidecar_of(from->fd(), name).has_value();
  const bool dst_verity = sidecar_of(to->fd(), newname).has_value();
  const bool exchange = flags & RENAME_EXCHANGE;
  // A sidecar never replaces a file that is not one.
  auto taken_by_other = [&](const node& dir, const std::string& side) {
    struct stat st {};
    return ::fstatat(dir.fd(), side.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           !sidecar_at(dir.fd(), side);
  };
  if ((src_verity && taken_by_other(*to, dst_side)) ||
      (exchange && dst_verity && taken_by_other(*from, src_side))) {
    return reply_err(req, EEXIST);
  }
  // The file a plain rename replaces: its sidecar goes, or is kept for its other names.
  const leaving_name replaced = exchange ? leaving_name{} : before_name_removed(to->fd(), newname);
  {
    as_caller who(req);
    if (::renameat2(from->fd(), name, to->fd(), newname, flags) != 0) {
      return reply_err(req, errno);
    }
  }
  int rc = 0;
  if (exchange && src_verity && dst_verity) {
    rc = ::renameat2(from->fd(), src_side.c_str(), to->fd(), dst_side.c_str(), RENAME_EXCHANGE);
  } else if (exchange && dst_verity) {
    rc = ::renameat(to->fd(), dst_side.c_str(), from->fd(), src_side.c_str());
  } else if (!exchange) {
    after_name_removed(to->fd(), newname, replaced,
                       f.root_fd());  // before a sidecar takes its place
    if (src_verity) rc = ::renameat(from->fd(), src_side.c_str(), to->fd(), dst_side.c_str());
  } else if (src_verity) {
    rc = ::renameat(from->fd(), src_side.c_str(), to->fd(), dst_side.c_str());
  }
  if (rc != 0) {
    log(log_level::warning,
        fmt::format("quiesce verity mount: rename: moving the sidecar: {}", std::strerror(errno)));
  }
  if (exchange) {
    const std::string tmp = fmt::format("\x01rename {}", newparent);
    f.renamed(to, newname, from, tmp);
    f.renamed(from, name, to, newname);
    f.renamed(from, tmp, from, name);
  } else {
    f.renamed(from, name, to, newname);
  }
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  struct statvfs sv {};
  if (::fstatvfs(n->fd(), &sv) != 0) return reply_err(req, errno);
  fuse_reply_statfs(req, &sv);
}

// ---- extended attributes: through the inode, as the caller ------------------------------
// A symlink's own attributes cannot be reached through its O_PATH descriptor without
// following it: refused (EPERM to set, ENODATA/empty to read), as libfuse's passthrough does.

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                 std::size_t size, int flags) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  if (S_ISLNK(n->type)) return reply_err(req, EPERM);
  as_caller who(req);
  const int rc = ::setxattr(proc_path(n->fd()).c_str(), name, value, size, flags);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  if (S_ISLNK(n->type)) return reply_err(req, ENODATA);
  as_caller who(req);
  std::vector<char> buf(size);
  const ssize_t len = ::getxattr(proc_path(n->fd()).c_str(), name, buf.data(), size);
  if (len < 0) return reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<std::size_t>(len));
  fuse_reply_buf(req, buf.data(), static_cast<std::size_t>(len));
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  if (S_ISLNK(n->type)) {
    if (size == 0) return (void)fuse_reply_xattr(req, 0);
    return (void)fuse_reply_buf(req, nullptr, 0);
  }
  as_caller who(req);
  std::vector<char> buf(size);
  const ssize_t len = ::listxattr(proc_path(n->fd()).c_str(), buf.data(), size);
  if (len < 0) return reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<std::size_t>(len));
  fuse_reply_buf(req, buf.data(), static_cast<std::size_t>(len));
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  const auto n = fs_of(req).node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  if (S_ISLNK(n->type)) return reply_err(req, EPERM);
  const std::string path = proc_path(n->fd());
  {
    as_caller who(req);
    if (::removexattr(path.c_str(), name) == 0) return reply_err(req, 0);
    // The kernel's kill-priv again (see op_setattr): a write by someone who may write the
    // file removes its file capability with the kernel's authority - the only way a caller
    // without CAP_SETFCAP reaches here with this name (the kernel refuses their own
    // removexattr of it first). As the caller it fails, and with it the write.
    const int err = errno;
    if (err != EPERM || std::strcmp(name, "security.capability") != 0 ||
        who.may_write(n->fd()) != 0) {
      return reply_err(req, err);
    }
  }
  fuse_reply_err(req, ::removexattr(path.c_str(), name) == 0 ? 0 : errno);
}

// ---- directories ------------------------------------------------------------------------

namespace {

// Reads the entries of `d` (from the start), sidecars (kept ones too) left out.
int list(dir_handle& d) {
  d.entries.clear();
  return for_each_entry(d.fd.get(), [&](const dirent& e) {
    const std::string name = e.d_name;
    if ((has_sidecar_suffix(name) || is_kept_sidecar_name(name)) && is_hidden(d.fd.get(), name)) {
      return;
    }
    d.entries.push_back({name, static_cast<mode_t>(DTTOIF(e.d_type)), e.d_ino ? e.d_ino : 1});
  });
}

}  // namespace

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto n = f.node_of(ino);
  if (!n) return reply_err(req, ESTALE);
  auto d = std::make_unique<dir_handle>();
  {
    as_caller who(req);
    d->fd = fd_t(::openat(n->fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!d->fd) return reply_err(req, errno);
  if (const int err = list(*d)) return reply_err(req, err);
  fi->fh = reinterpret_cast<std::uint64_t>(d.release());
  fuse_reply_open(req, fi);
}

void op_readdir(fuse_req_t req, fuse_ino_t, std::size_t size, off_t off, fuse_file_info* fi) {
  auto* d = reinterpret_cast<dir_handle*>(fi->fh);
  // From the start again (rewinddir): what the directory holds now.
  if (off == 0) {
    if (const int err = list(*d)) return reply_err(req, err);
  }
  std::vector<char> buf(size);
  std::size_t used = 0;
  for (std::size_t i = static_cast<std::size_t>(off); i < d->entries.size(); ++i) {
    const dir_handle::entry& e = d->entries[i];
    struct stat st {};
    st.st_mode = e.type;
    st.st_ino = e.ino;
    const std::size_t n = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(),
                                            &st, static_cast<off_t>(i + 1));
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<dir_handle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  const auto* d = reinterpret_cast<const dir_handle*>(fi->fh);
  const int rc = datasync ? ::fdatasync(d->fd.get()) : ::fsync(d->fd.get());
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

}  // namespace quiesce::mount::detail
