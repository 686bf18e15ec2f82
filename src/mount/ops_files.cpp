// SPDX-License-Identifier: Apache-2.0
// The file operations of `quiesce verity mount` (fs.hpp): opens that follow the inode's
// verity (never writable once it is a verity file, nor while it is being enabled), verified
// reads answered from the verification queue, and plain reads and writes.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <system_error>
#include <vector>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"
#include "sticky.hpp"

namespace quiesce::mount::detail {

namespace {

bool writable(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

// The flags the source file is opened with: the caller's access, never one that would
// block this thread, make the descriptor a terminal's, append behind the kernel's offsets,
// or need aligned buffers; O_NOFOLLOW is the kernel's business (it resolved the name), and
// would refuse the /proc/self/fd link.
int source_flags(int flags) {
  return (flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_APPEND | O_DIRECT | O_NOFOLLOW)) | O_NONBLOCK |
         O_CLOEXEC;
}

// Whether a sidecar appeared beside the name a plain node was looked up under, or an inode
// record on its inode, since (enabled behind the mount's back): the node no longer shows
// its inode's state.
bool became_verity(filesystem& f, const node& n) {
  std::shared_ptr<node> parent;
  std::string name;
  {
    quiesce::detail::lock_guard g(f.table);
    parent = n.parent;
    name = n.name;
  }
  if (!parent) return false;
  struct stat st {};
  return name_holds(parent->fd(), name, n.who->dev, n.who->ino, &st) &&
         (sidecar_of(parent->fd(), name).has_value() ||
          sidecar_by_record(n.who->path_fd.get(), st).has_value());
}

// Counts the open; sets h.verity for a verity node. 0 or an errno. ESTALE when the node no
// longer shows the inode's state (the kernel looks the name up again).
int admit(filesystem& f, handle& h) {
  if (!h.n->desc && !mutant::no_recheck && became_verity(f, *h.n)) {
    return h.writable ? EPERM : ESTALE;
  }
  identity& id = *h.n->who;
  if (!h.counters) {
    std::string path;  // relative to SOURCE, as the node was last named
    {
      quiesce::detail::lock_guard g(f.table);
      for (const node* n = h.n.get(); n != nullptr && n->parent; n = n->parent.get()) {
        path = path.empty() ? n->name : n->name + "/" + path;
      }
    }
    h.counters = &f.stats.of(id.dev, id.ino, path);
  }
  // Trees kept for closed files (retained.hpp) hold part of the tree budget (fs.hpp): an
  // open refused for want of it lets them go, unlocked, and tries once more.
  for (bool retry = true;; retry = false) {
    std::string refused;
    {
      quiesce::detail::lock_guard v(id.lock);
      if (id.desc && h.writable) return EPERM;  // as on a kernel fs-verity file, any name
      if (h.n->desc != id.desc) return ESTALE;
      if (h.writable && id.enabling) return ETXTBSY;  // the kernel's deny_write_access
      int err = 0;
      if (id.desc) {
        try {
          h.verity = f.verity_file(id);
        } catch (const std::system_error& e) {
          err = e.code().value();
          refused = e.what();
        } catch (const std::exception& e) {
          err = EIO;
          refused = e.what();
        }
      }
      if (err == 0) {
        ++id.opens;
        if (h.writable) ++id.writers;
        return 0;
      }
      if (err != ENOMEM || !retry) {
        log(log_level::warning, fmt::format("quiesce verity mount: {}", refused));
        return err;
      }
    }
    f.retained.clear();
  }
}

void unadmit(filesystem& f, handle& h) {
  identity& id = *h.n->who;
  std::shared_ptr<verified_file> mine;  // freed unlocked
  std::optional<std::size_t> kept;      // the last close of a verity file: its tree's bytes
  {
    quiesce::detail::lock_guard v(id.lock);
    if (h.writable) --id.writers;
    if (--id.opens == 0 && id.file) kept = id.file->tree().tree.size();
    mine = std::move(h.verity);
  }
  // The file stays with its identity for the next open, within the bounds (retained.hpp).
  if (kept) f.retained.closed(h.n->who, *kept);
}

// Opens the source file of `h` (its node's inode) and checks it is the regular file the
// node holds. 0 or an errno.
int open_source(fuse_req_t req, handle& h) {
  as_caller who(req);
  h.fd = fd_t(::open(proc_path(h.n->fd()).c_str(), source_flags(h.flags)));
  if (!h.fd) return errno;
  struct stat st {};
  if (::fstat(h.fd.get(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode) || !is_inode(st, h.n->who->dev, h.n->who->ino)) {
    return EINVAL;
  }
  if (!(h.flags & O_NONBLOCK))
    ::fcntl(h.fd.get(), F_SETFL, ::fcntl(h.fd.get(), F_GETFL) & ~O_NONBLOCK);
  return 0;
}

// Admits and opens `h`; fills `fi`. 0 or an errno (nothing left counted).
int open_handle(fuse_req_t req, filesystem& f, std::unique_ptr<handle>& h, fuse_file_info* fi) {
  if (const int err = admit(f, *h)) return err;
  if (const int err = open_source(req, *h)) {
    unadmit(f, *h);
    return err;
  }
  // The page-cache invariant (fs.hpp): a verity node's cache holds only pages verified
  // against its descriptor, so it may be kept; a plain node's may hold anything.
  fi->keep_cache = h->n->desc.has_value();
  fi->fh = reinterpret_cast<std::uint64_t>(h.get());
  quiesce::detail::lock_guard g(f.table);
  f.handles.insert(h.release());
  return 0;
}

}  // namespace

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  auto n = f.node_of(ino);
  if (!n) return (void)fuse_reply_err(req, ESTALE);
  if (!n->is_reg()) return (void)fuse_reply_err(req, n->is_dir() ? EISDIR : EINVAL);
  auto h = std::make_unique<handle>();
  h->n = std::move(n);
  h->flags = fi->flags;
  h->writable = writable(fi->flags);
  if (const int err = open_handle(req, f, h, fi)) return (void)fuse_reply_err(req, err);
  fuse_reply_open(req, fi);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto dir = f.node_of(parent);
  if (!dir) return (void)fuse_reply_err(req, ESTALE);
  if (is_hidden(dir->fd(), name)) return (void)fuse_reply_err(req, EEXIST);
  // Created exclusively: an existing file (a verity file, a FIFO) is never opened - let
  // alone truncated - here, but through a lookup and an open, which check it.
  fd_t fd;
  {
    as_caller who(req);
    fd = fd_t(
        ::openat(dir->fd(), name, source_flags(fi->flags) | O_CREAT | O_EXCL | O_NOFOLLOW, mode));
  }
  if (!fd) {
    if (errno != EEXIST || (fi->flags & O_EXCL)) return (void)fuse_reply_err(req, errno);
    std::shared_ptr<node> n;
    struct stat st {
    }, dir_st{};
    if (const int err = f.lookup(dir, name, n, st)) return (void)fuse_reply_err(req, err);
    const int sticky =
        ::fstatat(dir->fd(), "", &dir_st, AT_EMPTY_PATH) != 0
            ? errno
            : may_create_in_sticky(protected_regular_level(), fuse_req_ctx(req)->uid, dir_st, st);
    if (sticky != 0) {
      f.forget(n->id, 1);
      return (void)fuse_reply_err(req, sticky);
    }
    auto h = std::make_unique<handle>();
    h->n = n;
    h->flags = fi->flags & ~(O_CREAT | O_EXCL);
    h->writable = writable(h->flags);
    if (const int err =
            n->is_reg() ? open_handle(req, f, h, fi) : (n->is_dir() ? EISDIR : EEXIST)) {
      f.forget(n->id, 1);
      return (void)fuse_reply_err(req, err);
    }
    ::fstat(reinterpret_cast<handle*>(fi->fh)->fd.get(), &st);
    const fuse_entry_param e = entry_of(*n, st);
    return (void)fuse_reply_create(req, &e, fi);
  }
  // A sidecar left by an earlier file of this name is not the new file's.
  if (sidecar_of(dir->fd(), name)) {
    ::unlinkat(dir->fd(), (std::string(name) + sidecar_suffix).c_str(), 0);
  }
  struct stat st {};
  fd_t path(::open(proc_path(fd.get()).c_str(), O_PATH | O_CLOEXEC));
  if (!path || ::fstat(fd.get(), &st) != 0) return (void)fuse_reply_err(req, errno);
  const std::shared_ptr<node> n = f.remember(std::move(path), st, dir, name, std::nullopt);
  auto h = std::make_unique<handle>();
  h->n = n;
  h->flags = fi->flags & ~(O_CREAT | O_EXCL);
  h->writable = writable(h->flags);
  if (const int err = admit(f, *h)) {
    f.forget(n->id, 1);
    return (void)fuse_reply_err(req, err);
  }
  h->fd = std::move(fd);
  if (!(h->flags & O_NONBLOCK)) {
    ::fcntl(h->fd.get(), F_SETFL, ::fcntl(h->fd.get(), F_GETFL) & ~O_NONBLOCK);
  }
  fi->keep_cache = false;
  fi->fh = reinterpret_cast<std::uint64_t>(h.get());
  {
    quiesce::detail::lock_guard g(f.table);
    f.handles.insert(h.release());
  }
  const fuse_entry_param e = entry_of(*n, st);
  fuse_reply_create(req, &e, fi);
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  std::unique_ptr<handle> h(reinterpret_cast<handle*>(fi->fh));
  {
    quiesce::detail::lock_guard g(f.table);
    f.handles.erase(h.get());
  }
  h->fd.reset();
  unadmit(f, *h);
  h.reset();
  fuse_reply_err(req, 0);
}

void op_read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  auto* h = reinterpret_cast<handle*>(fi->fh);
  // A reference of our own: a plain read holds `plain` until after its reply, and once the
  // reply is sent the kernel may release the handle and forget the node - the last other
  // owners of the identity whose lock `plain` still has to release.
  const std::shared_ptr<identity> who = h->n->who;
  identity& id = *who;
  std::shared_ptr<verified_file> v;
  std::shared_lock plain(id.publish, std::defer_lock);
  {
    quiesce::detail::lock_guard g(id.lock);
    // A plain handle of an inode that became a verity file since it opened reads verified
    // from then on.
    if (!h->verity && id.desc) {
      try {
        h->verity = f.verity_file(id);
      } catch (const std::exception& e) {
        log(log_level::warning, fmt::format("quiesce verity mount: {}", e.what()));
        return (void)fuse_reply_err(req, EIO);
      }
    }
    v = h->verity;
  }
  if (v) {
    // The reply comes from the verification work item. The kernel holds the file open until
    // this read is answered, so the handle (and `v`) outlive it; teardown waits for the
    // queue before the session goes.
    file_counters* const counted = h->counters;
    v->read_async(
        static_cast<std::uint64_t>(off), size,
        [req, ino, counted](std::span<const std::uint8_t> data, int err, const std::string& why) {
          if (err != 0) {
            counted->eio.fetch_add(1, std::memory_order_relaxed);
            log(log_level::err,
                fmt::format("fs-verity (quiesce, inode {}): FILE CORRUPTED! {}", ino, why));
            fuse_reply_err(req, err);
            return;
          }
          counted->verified_reads.fetch_add(1, std::memory_order_relaxed);
          counted->verified_bytes.fetch_add(data.size(), std::memory_order_relaxed);
          fuse_reply_buf(req, reinterpret_cast<const char*>(data.data()), data.size());
        });
    return;
  }
  // Plain: no enable publishes while this read is between its check and its reply.
  plain.lock();
  {
    quiesce::detail::lock_guard g(id.lock);
    if (id.desc) {
      plain.unlock();
      return op_read(req, ino, size, off, fi);  // enabled meanwhile: verified
    }
  }
  std::vector<char> buf(size);
  const ssize_t n = ::pread(h->fd.get(), buf.data(), size, off);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  f.stats.plain_read();
  fuse_reply_buf(req, buf.data(), static_cast<std::size_t>(n));
}

void op_write(fuse_req_t req, fuse_ino_t, const char* buf, std::size_t size, off_t off,
              fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  if (const int err = drop_sgid_for_caller(req, h->fd.get())) return (void)fuse_reply_err(req, err);
  const ssize_t n = ::pwrite(h->fd.get(), buf, size, off);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_write(req, static_cast<std::size_t>(n));
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  // close(2) of a duplicate: what the source filesystem does at a close (NFS writes back).
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  const int dup = ::fcntl(h->fd.get(), F_DUPFD_CLOEXEC, 0);
  fuse_reply_err(req, dup >= 0 && ::close(dup) == 0 ? 0 : errno);
}

void op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  fuse_reply_err(req,
                 (datasync ? ::fdatasync(h->fd.get()) : ::fsync(h->fd.get())) == 0 ? 0 : errno);
}

void op_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
                  fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  if (!h->writable) return (void)fuse_reply_err(req, EBADF);
  if (const int err = drop_sgid_for_caller(req, h->fd.get())) return (void)fuse_reply_err(req, err);
  fuse_reply_err(req, ::fallocate(h->fd.get(), mode, offset, length) == 0 ? 0 : errno);
}

void op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t off_in, fuse_file_info* fi_in, fuse_ino_t,
                        off_t off_out, fuse_file_info* fi_out, std::size_t len, int flags) {
  auto* in = reinterpret_cast<handle*>(fi_in->fh);
  const auto* out = reinterpret_cast<const handle*>(fi_out->fh);
  {
    // Bytes of a verity file go through verified reads: the kernel falls back to them.
    quiesce::detail::lock_guard g(in->n->who->lock);
    if (in->verity || in->n->who->desc) return (void)fuse_reply_err(req, EOPNOTSUPP);
  }
  if (const int err = drop_sgid_for_caller(req, out->fd.get())) {
    return (void)fuse_reply_err(req, err);
  }
  loff_t from = off_in, to = off_out;
  const ssize_t n =
      ::copy_file_range(in->fd.get(), &from, out->fd.get(), &to, len, static_cast<unsigned>(flags));
  if (n < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_write(req, static_cast<std::size_t>(n));
}

void op_lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  const off_t at = ::lseek(h->fd.get(), off, whence);
  if (at < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_lseek(req, at);
}

}  // namespace quiesce::mount::detail
