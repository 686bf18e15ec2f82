// SPDX-License-Identifier: Apache-2.0
// The fs-verity ioctls of `quiesce verity mount` (fs.hpp), with the kernel's rules and
// errno values (fs/verity/enable.c, measure.c): FS_IOC_ENABLE_VERITY, FS_IOC_MEASURE_VERITY,
// FS_IOC_GETFLAGS (the source's flags and verity); FS_IOC_READ_VERITY_METADATA is refused
// on a verity file (ENODATA on any other, as the kernel's). 32-bit callers get the same.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/fs.h>
#include <linux/fsverity.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <system_error>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"

namespace quiesce::mount::detail {

namespace {

// The kernel's FS_VERITY_MAX_SIGNATURE_SIZE.
constexpr std::size_t max_signature_size = 16128;

bool is_power_of_2(std::uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

void warn(const std::string& what) {
  log(log_level::warning, "quiesce verity mount: enable: " + what);
}

// The verified_file a handle's reads and measure use (fs.hpp: handle::verity).
std::shared_ptr<verified_file> verity_of(filesystem& f, handle& h) {
  identity& id = *h.n->who;
  quiesce::detail::lock_guard g(id.lock);
  if (!h.verity && id.desc) h.verity = f.verity_file(id);
  return h.verity;
}

void measure(fuse_req_t req, filesystem& f, handle* h, const void* in, std::size_t in_size,
             std::size_t out_size) {
  std::shared_ptr<verified_file> v;
  try {
    if (h) v = verity_of(f, *h);
  } catch (const std::system_error& e) {
    return (void)fuse_reply_err(req, e.code().value());
  }
  if (!v) return (void)fuse_reply_err(req, ENODATA);
  if (in_size < sizeof(fsverity_digest) || out_size < sizeof(fsverity_digest)) {
    return (void)fuse_reply_err(req, EINVAL);
  }
  fsverity_digest head{};
  std::memcpy(&head, in, sizeof head);
  const std::vector<std::uint8_t> digest = v->digest();
  if (head.digest_size < digest.size()) return (void)fuse_reply_err(req, EOVERFLOW);
  std::vector<std::uint8_t> out(sizeof(fsverity_digest) + digest.size());
  head.digest_algorithm = static_cast<std::uint16_t>(v->tree().p.alg);
  head.digest_size = static_cast<std::uint16_t>(digest.size());
  std::memcpy(out.data(), &head, sizeof head);
  std::memcpy(out.data() + sizeof head, digest.data(), digest.size());
  if (out.size() > out_size) return (void)fuse_reply_err(req, EOVERFLOW);
  fuse_reply_ioctl(req, 0, out.data(), out.size());
}

// The sidecar being written: an unnamed file in the directory (O_TMPFILE), or where the
// source filesystem has none, a uniquely named one that is removed again.
struct pending_sidecar {
  fd_t fd;
  int dir = -1;
  std::string temp_name;  // empty for O_TMPFILE
  ~pending_sidecar() {
    if (!temp_name.empty()) ::unlinkat(dir, temp_name.c_str(), 0);
  }
  int open(int dir_fd, const std::string& name) {
    dir = dir_fd;
    fd = fd_t(::openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0644));
    if (fd) return 0;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return errno;
    std::random_device rd;
    for (int tries = 0; tries < 16; ++tries) {
      temp_name = fmt::format(".{}.{:08x}.tmp", name, rd());
      fd = fd_t(::openat(dir_fd, temp_name.c_str(),
                         O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (fd) return 0;
      if (errno != EEXIST) break;
    }
    temp_name.clear();
    return errno;
  }
  // Gives it `name` in the directory `to` (the one it was opened in, or another of the same
  // filesystem) unless that name exists (EEXIST).
  int place(int to, const std::string& name) {
    const int rc = temp_name.empty() ? ::linkat(AT_FDCWD, proc_path(fd.get()).c_str(), to,
                                                name.c_str(), AT_SYMLINK_FOLLOW)
                                     : ::linkat(dir, temp_name.c_str(), to, name.c_str(), 0);
    return rc == 0 ? 0 : errno;
  }
};

// Removes the sidecar an enable placed beside `name` in `dir_fd` (the file `sidecar_fd`),
// if that name still holds it.
void take_back(int dir_fd, const std::string& name, int sidecar_fd) {
  struct stat mine {};
  const std::string side = name + sidecar_suffix;
  if (::fstat(sidecar_fd, &mine) == 0 && name_holds(dir_fd, side, mine.st_dev, mine.st_ino)) {
    ::unlinkat(dir_fd, side.c_str(), 0);
  }
}

// Whether the inode `path_fd` holds (O_PATH) is append-only (chattr +a).
bool is_append_only(int path_fd) {
  struct statx sx {};
  return ::statx(path_fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, 0, &sx) == 0 &&
         (sx.stx_attributes_mask & STATX_ATTR_APPEND) && (sx.stx_attributes & STATX_ATTR_APPEND);
}

// The source inode's own flags (FS_IOC_GETFLAGS: lsattr's a, i, e, ...), or 0 where they
// cannot be read. Through a read-only descriptor the daemon opens: the caller holds an
// open file of it already.
int source_flags(const node& n) {
  fd_t fd(::open(proc_path(n.fd()).c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  int flags = 0;
  if (!fd || ::ioctl(fd.get(), FS_IOC_GETFLAGS, &flags) != 0) return 0;
  return flags;
}

void on_interrupt(fuse_req_t, void* stop) {
  static_cast<std::atomic<bool>*>(stop)->store(true);
}

// Builds the tree, writes and checks the sidecar, places it; the caller holds
// id.enabling. 0 or an errno.
int build_and_place(fuse_req_t req, filesystem& f, node& n, const fsverity_enable_arg& arg,
                    const std::uint8_t* salt, std::span<const std::uint8_t> sig) {
  identity& id = *n.who;
  verity::params prm;
  prm.alg = static_cast<verity::hash_alg>(arg.hash_algorithm);
  prm.block_size = arg.block_size;
  prm.salt.assign(salt, salt + arg.salt_size);
  struct stat st {};
  if (::fstat(n.fd(), &st) != 0) return errno;
  // The sidecar lives beside this name (links made through the mount afterwards get their
  // own link of it); the file's other names reach it only through the inode record. So a
  // file with more than one name is enabled only where the source keeps records - and only
  // if the record is then written (below) - else EMLINK: a name that could not find the
  // sidecar would read plain, and take writers.
  const bool several_names = st.st_nlink > 1 && !mutant::several_names_unrecorded;
  if (several_names && !can_keep_inode_record(n.fd())) {
    warn(
        fmt::format("inode {}: {} links, and no inode record can be kept here; enable a file "
                    "with one name",
                    id.ino, st.st_nlink));
    return EMLINK;
  }
  if (level0_over_cap(static_cast<std::uint64_t>(st.st_size), arg.block_size, prm.alg)) {
    return EFBIG;  // (the tree is built in memory: fs.hpp, "what trees may cost")
  }
  std::shared_ptr<node> parent;
  std::string name;
  {
    quiesce::detail::lock_guard g(f.table);
    parent = n.parent;
    name = n.name;
  }
  if (!parent) return EINVAL;  // the root is a directory
  // The name still holds this inode (a rename behind the mount's back: look it up again).
  if (!name_holds(parent->fd(), name, id.dev, id.ino)) return ESTALE;
  struct stat at {};
  const std::string side = name + sidecar_suffix;
  if (::fstatat(parent->fd(), side.c_str(), &at, AT_SYMLINK_NOFOLLOW) == 0) {
    warn(fmt::format("{}: a file of that name, not this file's sidecar, is in the way", side));
    return EEXIST;
  }
  fd_t data(::open(proc_path(n.fd()).c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!data) return errno;
  std::atomic<bool> stop{false};
  fuse_req_interrupt_func(req, on_interrupt, &stop);
  struct unregister {
    fuse_req_t req;
    ~unregister() { fuse_req_interrupt_func(req, nullptr, nullptr); }
  } unregister_on_exit{req};
  try {
    const verity::merkle_tree t =
        verity::build_tree(data.get(), name, prm, f.enable_wq.get(), &stop);
    // A signature no trusted certificate can check is refused before it is parsed, as the
    // kernel refuses one while its .fs-verity keyring is empty (ENOKEY).
    if (!sig.empty() && f.trust.certs.empty()) {
      warn("a built-in signature, and no trusted certificate (-o cert=) to check it");
      return ENOKEY;
    }
    const std::shared_ptr<node> opened_in = parent;  // holds the descriptor pending.dir is
    pending_sidecar pending;
    if (const int err = pending.open(parent->fd(), name)) return err;
    verity::write_sidecar(pending.fd.get(), side, t, sig);
    // The file's owner's, not the daemon's: sidecar_at accepts only those (one the daemon
    // owned, a user could enable a file they may write and move it beside another user's).
    if (f.switch_creds && ::fchown(pending.fd.get(), st.st_uid, st.st_gid) != 0) return errno;
    // Opened under the mount's trust policy (a signature checked) before it has a name.
    // Trees kept for closed files (retained.hpp) give way to it, as to an open (admit).
    std::shared_ptr<verified_file> v;
    try {
      v = f.open_charged(data.get(), pending.fd.get(), verity::descriptor(t), name);
    } catch (const std::system_error& e) {
      if (e.code().value() != ENOMEM) throw;
      f.retained.clear();
      v = f.open_charged(data.get(), pending.fd.get(), verity::descriptor(t), name);
    }
    // Beside the name the file has now: renamed through the mount while its tree was built,
    // the node followed it (filesystem::renamed); renamed behind the mount's back, ESTALE.
    {
      quiesce::detail::lock_guard g(f.table);
      parent = n.parent;
      name = n.name;
    }
    if (!parent || !name_holds(parent->fd(), name, id.dev, id.ino)) return ESTALE;
    if (const int err = pending.place(parent->fd(), name + sidecar_suffix)) return err;
    // A rename between that check and the link left it beside the old name: taken back.
    if (!name_holds(parent->fd(), name, id.dev, id.ino)) {
      take_back(parent->fd(), name, pending.fd.get());
      return ESTALE;
    }
    // The inode's own record of it, so that its other names - a hard link made in SOURCE
    // later, a mount started later - find it too (inode_record.cpp). Where the source
    // cannot keep one, the sidecar beside the name still does for that name - unless the
    // file has other names already: then the enable is undone (EMLINK, as above).
    if (!record_verity_on_inode(data.get(), pending.fd.get()) && several_names &&
        !mutant::record_failure_kept) {
      take_back(parent->fd(), name, pending.fd.get());
      warn(fmt::format("inode {}: {} links, and its inode record could not be written", id.ino,
                       st.st_nlink));
      return EMLINK;
    }
    fd_t kept(::fcntl(pending.fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!kept) return errno;
    // Published with no plain read between its check and its reply.
    std::unique_lock publishing(id.publish);
    quiesce::detail::lock_guard g(id.lock);
    id.desc = v->descriptor();
    id.sidecar = std::move(kept);
    id.file = std::move(v);
    return 0;
  } catch (const std::system_error& e) {
    warn(e.what());
    return e.code().value();
  } catch (const std::invalid_argument& e) {
    warn(e.what());
    return EINVAL;
  } catch (const std::exception& e) {
    warn(e.what());
    return EIO;
  }
}

// FS_IOC_ENABLE_VERITY: the kernel's FUSE driver sends the argument followed by the salt
// and the signature it points at. Checks in the kernel's order.
int enable(fuse_req_t req, filesystem& f, node& n, int open_flags, bool handle_writable,
           const void* in, std::size_t in_size) {
  if (in_size < sizeof(fsverity_enable_arg)) return EINVAL;
  fsverity_enable_arg arg{};
  std::memcpy(&arg, in, sizeof arg);
  if (arg.version != 1) return EINVAL;
  if (arg.__reserved1 != 0) return EINVAL;
  for (const auto r : arg.__reserved2) {
    if (r != 0) return EINVAL;
  }
  if (!is_power_of_2(arg.block_size)) return EINVAL;
  if (arg.salt_size > 32) return EMSGSIZE;
  if (arg.sig_size > max_signature_size) return EMSGSIZE;
  if (in_size != sizeof arg + arg.salt_size + arg.sig_size) return EINVAL;
  // The kernel's write-permission check reports a read-only mount first (sb_permission:
  // regular files, directories and symlinks), before the caller's own permission.
  if (f.read_only && (n.is_reg() || n.is_dir() || S_ISLNK(n.type))) return EROFS;
  {
    as_caller who(req);
    if (const int err = who.may_write(n.fd())) return err;
  }
  if ((open_flags & O_ACCMODE) != O_RDONLY && (open_flags & O_ACCMODE) != O_RDWR) return EBADF;
  if (is_append_only(n.fd())) return EPERM;  // the kernel's IS_APPEND check, in its place
  if (n.is_dir()) return EISDIR;
  if (!n.is_reg()) return EINVAL;
  if (f.read_only) return EROFS;
  if (handle_writable && !mutant::enable_ignores_writers) return ETXTBSY;
  identity& id = *n.who;
  {
    quiesce::detail::lock_guard g(id.lock);
    if (id.writers > 0 && !mutant::enable_ignores_writers) return ETXTBSY;
    if (id.desc) return EEXIST;
    if (id.enabling) return EBUSY;
    id.enabling = true;
  }
  int err = 0;
  if (arg.hash_algorithm != FS_VERITY_HASH_ALG_SHA256 &&
      arg.hash_algorithm != FS_VERITY_HASH_ALG_SHA512) {
    err = EINVAL;
  } else if (arg.block_size < 1024 ||
             arg.block_size > static_cast<std::uint32_t>(::sysconf(_SC_PAGESIZE))) {
    err = EINVAL;  // the kernel: 1024 .. PAGE_SIZE
  } else if (f.require_signatures && arg.sig_size == 0) {
    err = EPERM;
  } else {
    const auto* extra = static_cast<const std::uint8_t*>(in) + sizeof arg;
    err = build_and_place(req, f, n, arg, extra,
                          std::span<const std::uint8_t>(extra + arg.salt_size, arg.sig_size));
  }
  {
    quiesce::detail::lock_guard g(id.lock);
    id.enabling = false;
  }
  // Pages cached while the file was plain are not verified: every node of the inode drops
  // them (no lock held: the kernel may wait for reads this daemon answers).
  if (err == 0 && !mutant::no_invalidate) f.invalidate(id);
  return err;
}

}  // namespace

void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void*, fuse_file_info* fi,
              unsigned flags, const void* in, std::size_t in_size, std::size_t out_size) {
  filesystem& f = fs_of(req);
  // A 32-bit caller's (FUSE_IOCTL_COMPAT) are answered as the kernel's compat_ioctl does
  // (ext4_compat_ioctl): FS_IOC32_GETFLAGS is FS_IOC_GETFLAGS with an int, and the verity
  // ioctls have the same numbers and layouts (fixed-size fields, 64-bit pointers).
  const auto n = f.node_of(ino);
  if (!n) return (void)fuse_reply_err(req, ESTALE);
  // A directory's handle is a dir_handle: never read as a file's.
  handle* h = (flags & FUSE_IOCTL_DIR) ? nullptr : reinterpret_cast<handle*>(fi->fh);
  // Only a 32-bit caller's (a 64-bit one's FS_IOC32_GETFLAGS is ENOTTY, as on ext4); the
  // kernel (5.13+) already turns a 32-bit GETFLAGS into a fileattr request itself, so this
  // is for older ones. (The same number on a 32-bit host.)
  if (cmd == FS_IOC32_GETFLAGS && (flags & FUSE_IOCTL_COMPAT)) cmd = FS_IOC_GETFLAGS;
  switch (cmd) {
    case FS_IOC_MEASURE_VERITY:
      return measure(req, f, h, in, in_size, out_size);
    case FS_IOC_ENABLE_VERITY: {
      const int err = enable(req, f, *n, h ? h->flags : O_RDONLY, h && h->writable, in, in_size);
      if (err != 0) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case FS_IOC_GETFLAGS: {
      int iflags = source_flags(*n) & ~FS_VERITY_FL;  // verity is the mount's to say
      {
        quiesce::detail::lock_guard g(n->who->lock);
        if (n->who->desc) iflags |= FS_VERITY_FL;
      }
      if (out_size < sizeof iflags) return (void)fuse_reply_err(req, EINVAL);
      return (void)fuse_reply_ioctl(req, 0, &iflags, sizeof iflags);
    }
    case FS_IOC_READ_VERITY_METADATA: {
      // Its argument holds a pointer into the caller's memory that a restricted FUSE ioctl
      // cannot write through: refused on a verity file; on any other, the kernel's ENODATA.
      quiesce::detail::lock_guard g(n->who->lock);
      return (void)fuse_reply_err(req, n->who->desc ? EOPNOTSUPP : ENODATA);
    }
    default:
      return (void)fuse_reply_err(req, ENOTTY);
  }
}

}  // namespace quiesce::mount::detail
