// The FUSE filesystem behind `quiesce verity mount` (verity_fs.hpp): the inode table, the
// open files and their verified_file, the low-level operations and the fs-verity ioctls.
#define FUSE_USE_VERSION 312
#include "quiesce/mount/verity_fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fuse3/fuse_lowlevel.h>
#include <linux/fs.h>
#include <linux/fsverity.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "quiesce/log.hpp"
#include "quiesce/topology.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::mount {

namespace fs = std::filesystem;
using verity::verified_file;

namespace {

constexpr double kTimeout = 1.0;  // attribute and entry cache, seconds
constexpr const char* kSidecar = ".verity";
constexpr const char* kPending = ".verity.pending";  // a sidecar being enabled

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Names the mount hides: sidecars, and those being written by an enable.
bool is_hidden(const std::string& name) {
  return ends_with(name, kSidecar) || ends_with(name, kPending);
}

// A file's state while any handle to it is open.
struct open_file {
  int opens = 0;
  std::shared_ptr<verified_file> verity;  // set if it is a verity file
};

// One open: the descriptor of the source file (plain files read and write through it).
// One open. A handle of a verity file holds its verified_file: its reads are verified
// whatever happens to the inode's other opens.
struct handle {
  fuse_ino_t ino;
  int fd;
  int flags;
  std::shared_ptr<verified_file> verity;  // set for a verity file (or once enabled)
};

struct dir_listing {
  struct entry {
    std::string name;
    mode_t type;
    ino_t ino;  // the source's: never 0, which readdir(3) would skip
  };
  std::vector<entry> entries;
};

struct filesystem {
  fs::path source;                       // I
  verity::trust_policy trust;            // I
  bool require_signatures = false;       // I
  std::unique_ptr<workqueue> verify_wq;  // I (the queue itself is thread-safe)

  std::mutex lock;
  struct node {
    std::string rel;  // path below source ("" for the root)
    std::uint64_t nlookup = 0;
  };
  std::unordered_map<fuse_ino_t, node> nodes{{FUSE_ROOT_ID, {"", 1}}};      // L
  std::unordered_map<std::string, fuse_ino_t> by_path{{"", FUSE_ROOT_ID}};  // L
  fuse_ino_t next_ino = FUSE_ROOT_ID + 1;                                   // L
  std::unordered_map<fuse_ino_t, open_file> files;                          // L

  // The source path of `ino`, or nullopt if it is unknown (forgotten).
  std::optional<fs::path> path_of(fuse_ino_t ino) {
    std::lock_guard g(lock);
    const auto it = nodes.find(ino);
    if (it == nodes.end()) return std::nullopt;
    return it->second.rel.empty() ? source : source / it->second.rel;
  }
  std::optional<std::string> rel_of(fuse_ino_t ino) {
    std::lock_guard g(lock);
    const auto it = nodes.find(ino);
    if (it == nodes.end()) return std::nullopt;
    return it->second.rel;
  }
  fuse_ino_t remember(const std::string& rel) {
    std::lock_guard g(lock);
    auto [it, fresh] = by_path.try_emplace(rel, next_ino);
    if (fresh) nodes[next_ino++] = {rel, 0};
    ++nodes[it->second].nlookup;
    return it->second;
  }
  void forget(fuse_ino_t ino, std::uint64_t n) {
    std::lock_guard g(lock);
    const auto it = nodes.find(ino);
    if (it == nodes.end() || ino == FUSE_ROOT_ID) return;
    it->second.nlookup -= std::min(n, it->second.nlookup);
    if (it->second.nlookup == 0) {
      by_path.erase(it->second.rel);
      nodes.erase(it);
    }
  }
  std::shared_ptr<verified_file> verity_of(fuse_ino_t ino) {
    std::lock_guard g(lock);
    const auto it = files.find(ino);
    return it == files.end() ? nullptr : it->second.verity;
  }
};

filesystem& fs_of(fuse_req_t req) {
  return *static_cast<filesystem*>(fuse_req_userdata(req));
}

std::string join(const std::string& rel, const char* name) {
  return rel.empty() ? std::string(name) : rel + "/" + name;
}

bool has_sidecar(const fs::path& p) {
  struct stat st {};
  return ::stat((p.string() + kSidecar).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// ---- attributes and names -------------------------------------------------------------

// A name's entry: its inode here and the source's attributes under it.
fuse_entry_param entry_of(fuse_ino_t ino, const struct stat& st) {
  fuse_entry_param e{};
  e.ino = ino;
  e.attr = st;
  e.attr.st_ino = ino;
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  return e;
}

void reply_entry(fuse_req_t req, fuse_ino_t ino, const struct stat& st) {
  const fuse_entry_param e = entry_of(ino, st);
  fuse_reply_entry(req, &e);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto rel = f.rel_of(parent);
  if (!rel) return (void)fuse_reply_err(req, ENOENT);
  if (is_hidden(name)) return (void)fuse_reply_err(req, ENOENT);
  const std::string child = join(*rel, name);
  struct stat st {};
  if (::lstat((f.source / child).c_str(), &st) != 0) return (void)fuse_reply_err(req, errno);
  reply_entry(req, f.remember(child), st);
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
  const auto p = fs_of(req).path_of(ino);
  if (!p) return (void)fuse_reply_err(req, ENOENT);
  struct stat st {};
  if (::lstat(p->c_str(), &st) != 0) return (void)fuse_reply_err(req, errno);
  st.st_ino = ino;
  fuse_reply_attr(req, &st, kTimeout);
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto p = f.path_of(ino);
  if (!p) return (void)fuse_reply_err(req, ENOENT);
  if ((to_set & FUSE_SET_ATTR_SIZE) && has_sidecar(*p)) return (void)fuse_reply_err(req, EPERM);
  int rc = 0;
  if (to_set & FUSE_SET_ATTR_MODE) rc = ::chmod(p->c_str(), attr->st_mode);
  if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE)) {
    rc = fi ? ::ftruncate(reinterpret_cast<handle*>(fi->fh)->fd, attr->st_size)
            : ::truncate(p->c_str(), attr->st_size);
  }
  if (rc == 0 && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
      ts[0].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_ATIME)
      ts[0] = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
      ts[1].tv_nsec = UTIME_NOW;
    else if (to_set & FUSE_SET_ATTR_MTIME)
      ts[1] = attr->st_mtim;
    rc = ::utimensat(AT_FDCWD, p->c_str(), ts, AT_SYMLINK_NOFOLLOW);
  }
  if (rc != 0) return (void)fuse_reply_err(req, errno);
  op_getattr(req, ino, fi);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  const auto p = fs_of(req).path_of(ino);
  if (!p) return (void)fuse_reply_err(req, ENOENT);
  char buf[PATH_MAX + 1];
  const ssize_t n = ::readlink(p->c_str(), buf, PATH_MAX);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  buf[n] = '\0';
  fuse_reply_readlink(req, buf);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs sv {};
  if (::statvfs(fs_of(req).source.c_str(), &sv) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_statfs(req, &sv);
}

// ---- directories ----------------------------------------------------------------------

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const auto p = fs_of(req).path_of(ino);
  if (!p) return (void)fuse_reply_err(req, ENOENT);
  DIR* d = ::opendir(p->c_str());
  if (!d) return (void)fuse_reply_err(req, errno);
  auto listing = std::make_unique<dir_listing>();
  while (const dirent* e = ::readdir(d)) {
    if (is_hidden(e->d_name)) continue;
    listing->entries.push_back(
        {e->d_name, static_cast<mode_t>(DTTOIF(e->d_type)), e->d_ino ? e->d_ino : 1});
  }
  ::closedir(d);
  fi->fh = reinterpret_cast<std::uint64_t>(listing.release());
  fuse_reply_open(req, fi);
}

void op_readdir(fuse_req_t req, fuse_ino_t, std::size_t size, off_t off, fuse_file_info* fi) {
  const auto* listing = reinterpret_cast<const dir_listing*>(fi->fh);
  std::vector<char> buf(size);
  std::size_t used = 0;
  for (std::size_t i = static_cast<std::size_t>(off); i < listing->entries.size(); ++i) {
    const dir_listing::entry& e = listing->entries[i];
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
  delete reinterpret_cast<dir_listing*>(fi->fh);
  fuse_reply_err(req, 0);
}

// ---- files ----------------------------------------------------------------------------

bool writable(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

// Opens `ino` for `fi` (its flags), the verity state set up on its first open. 0 or errno.
int open_ino(filesystem& f, fuse_ino_t ino, const fs::path& p, fuse_file_info* fi) {
  const bool verity_file = has_sidecar(p);
  if (verity_file && writable(fi->flags)) return EPERM;  // as on a kernel fs-verity file
  const int fd = ::open(p.c_str(), (fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY)) | O_CLOEXEC);
  if (fd < 0) return errno;
  // The inode's verified_file is shared by its opens; the check for one and the count of
  // this open are made under one lock, so a last release in between cannot leave this
  // open without it.
  std::shared_ptr<verified_file> opened, shared;
  for (;;) {
    {
      std::lock_guard g(f.lock);
      const auto it = f.files.find(ino);
      const bool have = it != f.files.end() && it->second.verity;
      if (!verity_file || have || opened) {
        open_file& of = f.files[ino];
        if (verity_file && !of.verity) of.verity = std::move(opened);
        ++of.opens;
        shared = of.verity;
        break;
      }
    }
    try {  // outside the lock: it reads the tree
      opened = std::make_shared<verified_file>(p, *f.verify_wq, f.trust);
    } catch (const std::system_error& e) {
      log(log_level::warning, fmt::format("quiesce verity mount: {}", e.what()));
      ::close(fd);
      return e.code().value();
    } catch (const std::exception& e) {
      log(log_level::warning, fmt::format("quiesce verity mount: {}", e.what()));
      ::close(fd);
      return EIO;
    }
  }
  fi->fh = reinterpret_cast<std::uint64_t>(new handle{ino, fd, fi->flags, std::move(shared)});
  fi->keep_cache = verity_file;  // immutable content: the page cache holds verified pages
  return 0;
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto p = f.path_of(ino);
  if (!p) return (void)fuse_reply_err(req, ENOENT);
  if (const int err = open_ino(f, ino, *p, fi)) return (void)fuse_reply_err(req, err);
  fuse_reply_open(req, fi);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto rel = f.rel_of(parent);
  if (!rel) return (void)fuse_reply_err(req, ENOENT);
  if (is_hidden(name)) return (void)fuse_reply_err(req, EPERM);  // no sidecars by hand
  const std::string child = join(*rel, name);
  const fs::path p = f.source / child;
  const int fd = ::open(p.c_str(), (fi->flags | O_CREAT | O_CLOEXEC) & ~O_NOCTTY, mode);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  ::close(fd);
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return (void)fuse_reply_err(req, errno);
  const fuse_ino_t ino = f.remember(child);
  fi->flags &= ~(O_CREAT | O_EXCL);
  if (const int err = open_ino(f, ino, p, fi)) {
    f.forget(ino, 1);
    return (void)fuse_reply_err(req, err);
  }
  const fuse_entry_param e = entry_of(ino, st);
  fuse_reply_create(req, &e, fi);
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  std::unique_ptr<handle> h(reinterpret_cast<handle*>(fi->fh));
  ::close(h->fd);
  h->verity.reset();
  std::shared_ptr<verified_file> last;  // destroyed outside the lock
  {
    std::lock_guard g(f.lock);
    const auto it = f.files.find(ino);
    if (it != f.files.end() && --it->second.opens == 0) {
      last = std::move(it->second.verity);
      f.files.erase(it);
    }
  }
  last.reset();
  fuse_reply_err(req, 0);
}

void op_read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi) {
  filesystem& f = fs_of(req);
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  // A verity file's handle holds it; a plain file enabled since it was opened reads
  // verified from then on.
  if (std::shared_ptr<verified_file> v = h->verity ? h->verity : f.verity_of(ino)) {
    // The reply comes from the verification work item. The kernel holds the file open
    // until this read is answered, so `v` outlives it without a reference here.
    v->read_async(
        static_cast<std::uint64_t>(off), size,
        [req, ino](std::span<const std::uint8_t> data, int err, const std::string& why) {
          if (err != 0) {
            log(log_level::err,
                fmt::format("fs-verity (quiesce, inode {}): FILE CORRUPTED! {}", ino, why));
            fuse_reply_err(req, err);
            return;
          }
          fuse_reply_buf(req, reinterpret_cast<const char*>(data.data()), data.size());
        });
    return;
  }
  std::vector<char> buf(size);
  const ssize_t n = ::pread(h->fd, buf.data(), size, off);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_buf(req, buf.data(), static_cast<std::size_t>(n));
}

void op_write(fuse_req_t req, fuse_ino_t, const char* buf, std::size_t size, off_t off,
              fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  const ssize_t n = ::pwrite(h->fd, buf, size, off);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_write(req, static_cast<std::size_t>(n));
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const handle*>(fi->fh);
  fuse_reply_err(req, (datasync ? ::fdatasync(h->fd) : ::fsync(h->fd)) == 0 ? 0 : errno);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  filesystem& f = fs_of(req);
  const auto rel = f.rel_of(parent);
  if (!rel) return (void)fuse_reply_err(req, ENOENT);
  if (is_hidden(name)) return (void)fuse_reply_err(req, ENOENT);
  const fs::path p = f.source / join(*rel, name);
  if (::unlink(p.c_str()) != 0) return (void)fuse_reply_err(req, errno);
  ::unlink((p.string() + kSidecar).c_str());  // its fs-verity metadata goes with it
  fuse_reply_err(req, 0);
}

// ---- the fs-verity ioctls -------------------------------------------------------------

void measure(fuse_req_t req, filesystem& f, fuse_ino_t ino, const void* in, std::size_t in_size,
             std::size_t out_size) {
  const std::shared_ptr<verified_file> v = f.verity_of(ino);
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

// FS_IOC_ENABLE_VERITY: the kernel's FUSE driver sends the argument followed by the salt
// and the signature it points at.
int enable(filesystem& f, fuse_ino_t ino, const handle& h, const void* in, std::size_t in_size) {
  if (in_size < sizeof(fsverity_enable_arg)) return EINVAL;
  fsverity_enable_arg arg{};
  std::memcpy(&arg, in, sizeof arg);
  if (arg.version != 1) return EINVAL;
  if (arg.__reserved1 != 0) return EINVAL;
  for (const auto r : arg.__reserved2) {
    if (r != 0) return EINVAL;
  }
  if (in_size != sizeof arg + arg.salt_size + arg.sig_size) return EINVAL;
  if ((h.flags & O_ACCMODE) == O_WRONLY) return EBADF;
  if ((h.flags & O_ACCMODE) != O_RDONLY) return ETXTBSY;  // open for writing
  const auto p = f.path_of(ino);
  if (!p) return ENOENT;
  if (has_sidecar(*p) || f.verity_of(ino)) return EEXIST;
  verity::params prm;
  if (arg.hash_algorithm == FS_VERITY_HASH_ALG_SHA256) {
    prm.alg = verity::hash_alg::sha256;
  } else if (arg.hash_algorithm == FS_VERITY_HASH_ALG_SHA512) {
    prm.alg = verity::hash_alg::sha512;
  } else {
    return EINVAL;
  }
  prm.block_size = arg.block_size;
  const auto* extra = static_cast<const std::uint8_t*>(in) + sizeof arg;
  prm.salt.assign(extra, extra + arg.salt_size);
  const std::span<const std::uint8_t> sig(extra + arg.salt_size, arg.sig_size);
  if (f.require_signatures && sig.empty()) return EPERM;
  // The sidecar is written under a hidden name, opened under the mount's trust policy (the
  // signature checked), and only then renamed into place.
  const fs::path pending = p->string() + kPending;
  const fs::path sidecar = p->string() + kSidecar;
  try {
    prm.validate();
    verity::enable(*p, prm, pending, f.verify_wq.get(), sig);
    auto v = std::make_shared<verified_file>(*p, *f.verify_wq, f.trust, pending);
    if (::rename(pending.c_str(), sidecar.c_str()) != 0) {
      const int err = errno;
      ::unlink(pending.c_str());
      return err;
    }
    std::lock_guard g(f.lock);
    f.files[ino].verity = std::move(v);  // this open counts it already
  } catch (const std::system_error& e) {
    ::unlink(pending.c_str());
    log(log_level::warning, fmt::format("quiesce verity mount: enable: {}", e.what()));
    return e.code().value();
  } catch (const std::invalid_argument& e) {
    ::unlink(pending.c_str());
    log(log_level::warning, fmt::format("quiesce verity mount: enable: {}", e.what()));
    const std::string what = e.what();
    return what.rfind("signature", 0) == 0 ? EBADMSG : EINVAL;
  } catch (const std::exception& e) {
    ::unlink(pending.c_str());
    log(log_level::warning, fmt::format("quiesce verity mount: enable: {}", e.what()));
    return EIO;
  }
  return 0;
}

void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void*, fuse_file_info* fi,
              unsigned flags, const void* in, std::size_t in_size, std::size_t out_size) {
  filesystem& f = fs_of(req);
  if (flags & FUSE_IOCTL_COMPAT) return (void)fuse_reply_err(req, ENOSYS);
  switch (cmd) {
    case FS_IOC_MEASURE_VERITY:
      return measure(req, f, ino, in, in_size, out_size);
    case FS_IOC_ENABLE_VERITY: {
      const int err = enable(f, ino, *reinterpret_cast<const handle*>(fi->fh), in, in_size);
      if (err != 0) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case FS_IOC_GETFLAGS: {
      const auto p = f.path_of(ino);
      if (!p) return (void)fuse_reply_err(req, ENOENT);
      const int iflags = (f.verity_of(ino) || has_sidecar(*p)) ? FS_VERITY_FL : 0;
      if (out_size < sizeof iflags) return (void)fuse_reply_err(req, EINVAL);
      return (void)fuse_reply_ioctl(req, 0, &iflags, sizeof iflags);
    }
    case FS_IOC_READ_VERITY_METADATA:
      // Its argument holds a pointer into the caller's memory that a restricted FUSE ioctl
      // cannot write through.
      return (void)fuse_reply_err(req, EOPNOTSUPP);
    default:
      return (void)fuse_reply_err(req, ENOTTY);
  }
}

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops o{};
  o.lookup = op_lookup;
  o.forget = op_forget;
  o.forget_multi = op_forget_multi;
  o.getattr = op_getattr;
  o.setattr = op_setattr;
  o.readlink = op_readlink;
  o.statfs = op_statfs;
  o.opendir = op_opendir;
  o.readdir = op_readdir;
  o.releasedir = op_releasedir;
  o.open = op_open;
  o.create = op_create;
  o.release = op_release;
  o.read = op_read;
  o.write = op_write;
  o.flush = op_flush;
  o.fsync = op_fsync;
  o.unlink = op_unlink;
  o.ioctl = op_ioctl;
  return o;
}();

verity::trust_policy policy_of(const verity_mount_options& o) {
  verity::trust_policy t;
  for (const fs::path& c : o.certs)
    t.certs.add_file(c);
  t.require_signatures = o.require_signatures;
  // Without required signatures, a verity file is opened on its own tree; a signature it
  // carries must still verify against the certificates, if any are given.
  t.integrity_only = !o.require_signatures;
  return t;
}

struct session_deleter {
  void operator()(fuse_session* s) const { fuse_session_destroy(s); }
};

}  // namespace

std::optional<std::string> verity_mount_refusal(const fs::path& source,
                                                const fs::path& mountpoint) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return fmt::format("/dev/fuse: {} (FUSE is not available here)", std::strerror(errno));
  }
  std::error_code ec;
  if (!fs::is_directory(source, ec)) return fmt::format("{}: not a directory", source.string());
  if (!fs::exists(mountpoint, ec)) return fmt::format("{}: no such directory", mountpoint.string());
  if (!fs::is_directory(mountpoint, ec)) {
    return fmt::format("{}: not a directory", mountpoint.string());
  }
  if (!fs::is_empty(mountpoint, ec)) return fmt::format("{}: not empty", mountpoint.string());
  if (ec) return fmt::format("{}: {}", mountpoint.string(), ec.message());
  if (fs::equivalent(source, mountpoint, ec)) {
    return fmt::format("{}: the mountpoint cannot be the source", mountpoint.string());
  }
  return std::nullopt;
}

struct verity_mount::impl {
  filesystem f;
  std::unique_ptr<fuse_session, session_deleter> se;
  fs::path mountpoint;
  bool signals = false;
  std::atomic<bool> unmounted{false};
  std::atomic<bool> detached{false};  // unmount() took the mount away itself
};

verity_mount::verity_mount(const fs::path& source, const fs::path& mountpoint,
                           const verity_mount_options& o)
    : impl_(std::make_unique<impl>()) {
  if (auto why = verity_mount_refusal(source, mountpoint)) throw mount_error(*why, 2);
  if (o.require_signatures && o.certs.empty()) {
    throw mount_error("--require-signatures: no trusted certificate (--cert FILE)", 2);
  }
  filesystem& f = impl_->f;
  f.source = fs::canonical(source);
  f.require_signatures = o.require_signatures;
  try {
    f.trust = policy_of(o);
  } catch (const std::exception& e) {
    throw mount_error(e.what(), 2);
  }
  // The seed's queues: the patch's (per-CPU, highpri, max_active = CPUs) or the one before.
  const int cpus = static_cast<int>(system_topology().cpus().size());
  f.verify_wq = o.unbound
                    ? std::make_unique<workqueue>(
                          "fsverity_read_queue_unbound",
                          wq_options{.unbound = true, .highpri = true, .max_active = cpus})
                    : std::make_unique<workqueue>("fsverity_read_queue",
                                                  wq_options{.highpri = true, .max_active = cpus});

  std::vector<std::string> args{"quiesce-verity", "-o", "fsname=quiesce-verity,subtype=verity"};
  if (::geteuid() == 0) args.back() += ",allow_other,default_permissions";
  if (o.debug) args.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  fuse_args fa = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  impl_->se.reset(fuse_session_new(&fa, &kOps, sizeof kOps, &f));
  fuse_opt_free_args(&fa);
  if (!impl_->se) throw mount_error("libfuse: cannot create a session", 1);
  if (o.handle_signals) {
    if (fuse_set_signal_handlers(impl_->se.get()) != 0) {
      throw mount_error("libfuse: cannot install the signal handlers", 1);
    }
    impl_->signals = true;
  }
  impl_->mountpoint = fs::absolute(mountpoint);
  if (fuse_session_mount(impl_->se.get(), impl_->mountpoint.c_str()) != 0) {
    if (impl_->signals) fuse_remove_signal_handlers(impl_->se.get());
    throw mount_error(fmt::format("{}: cannot mount (see the line above)", mountpoint.string()), 2);
  }
}

verity_mount::~verity_mount() {
  if (!impl_->unmounted.exchange(true)) fuse_session_unmount(impl_->se.get());
  if (impl_->signals) fuse_remove_signal_handlers(impl_->se.get());
}

void verity_mount::serve() {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, 16);
  const int rc = fuse_session_loop_mt(impl_->se.get(), cfg);
  fuse_loop_cfg_destroy(cfg);
  if (impl_->detached.load()) {
    // unmount() detached the mount and ended the loop, maybe before the kernel ended the
    // connection. libfuse's unmount below unmounts again unless the device reports the
    // connection gone - and on the bare directory it would print "fuse: failed to
    // unmount". Once no file is open the kernel ends it at once: wait a little for that.
    pollfd pfd{fuse_session_fd(impl_->se.get()), 0, 0};
    for (int i = 0; i < 100 && !(::poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR)); ++i)
      ::usleep(10'000);
  }
  if (!impl_->unmounted.exchange(true)) fuse_session_unmount(impl_->se.get());
  if (rc < 0) {
    throw mount_error(fmt::format("libfuse: the session ended with {}", std::strerror(-rc)), 1);
  }
}

void verity_mount::unmount() {
  fuse_session_exit(impl_->se.get());
  // Detached: the kernel ends the connection once the last open file closes, and the
  // session's threads see it (ENODEV) and return.
  if (::umount2(impl_->mountpoint.c_str(), MNT_DETACH) == 0) {
    impl_->detached = true;
  } else {
    const std::string cmd = "fusermount3 -u -z '" + impl_->mountpoint.string() + "' 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) {
      impl_->detached = true;
    } else {
      log(log_level::warning,
          fmt::format("quiesce verity mount: cannot unmount {}", impl_->mountpoint.string()));
    }
  }
}

workqueue& verity_mount::verify_queue() {
  return *impl_->f.verify_wq;
}

void serve_verity_mount(const fs::path& source, const fs::path& mountpoint,
                        const verity_mount_options& o, const std::function<void()>& mounted) {
  verity_mount m(source, mountpoint, o);
  if (mounted) mounted();
  m.serve();
}

}  // namespace quiesce::mount
