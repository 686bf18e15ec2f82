// SPDX-License-Identifier: Apache-2.0
// The node table of `quiesce verity mount` (fs.hpp): resolving a name once, deciding the
// verity state of what it names, and remembering the node the kernel will refer to.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"

namespace quiesce::mount::detail {

std::string proc_path(int fd) {
  return fmt::format("/proc/self/fd/{}", fd);
}

bool fd_holds(int fd, dev_t dev, ino_t ino) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && is_inode(st, dev, ino);
}

int for_each_entry(int dir_fd, const std::function<void(const dirent&)>& fn) {
  fd_t copy(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!copy) return errno;
  DIR* dp = ::fdopendir(copy.get());
  if (!dp) return errno;
  copy.release();
  while (const dirent* e = ::readdir(dp))
    fn(*e);
  ::closedir(dp);
  return 0;
}

bool name_holds(int dir_fd, const std::string& name, dev_t dev, ino_t ino, struct stat* st) {
  struct stat at {};
  if (!st) st = &at;
  return ::fstatat(dir_fd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 && is_inode(*st, dev, ino);
}

bool level0_over_cap(std::uint64_t data_size, std::uint64_t block_size, verity::hash_alg alg) {
  const std::uint64_t blocks = data_size / block_size + (data_size % block_size != 0);
  return blocks > max_level0_bytes / verity::digest_size(alg);
}

namespace {

// The fs-verity descriptor's fields the tree's shape follows (fsverity_descriptor).
struct tree_shape {
  verity::hash_alg alg;
  std::uint64_t block_size;
  std::uint64_t data_size;
};

tree_shape shape_of(const descriptor& d) {
  std::uint64_t data_size = 0;
  for (int i = 7; i >= 0; --i)  // __le64 data_size at offset 8
    data_size = (data_size << 8) | d[8 + static_cast<std::size_t>(i)];
  return {static_cast<verity::hash_alg>(d[1]), std::uint64_t{1} << d[2], data_size};
}

}  // namespace

std::uint64_t tree_bytes_of(const descriptor& d) {
  const tree_shape t = shape_of(d);
  const std::uint64_t per_block = t.block_size / verity::digest_size(t.alg);
  std::uint64_t blocks = t.data_size / t.block_size + (t.data_size % t.block_size != 0);
  std::uint64_t bytes = 0;
  while (blocks > 1) {  // one level: its hashes of the level below, in whole blocks
    blocks = blocks / per_block + (blocks % per_block != 0);
    bytes += blocks * t.block_size;
  }
  return bytes;
}

bool tree_budget::charge(std::uint64_t bytes) noexcept {
  std::uint64_t now = held.load();
  do {
    if (bytes > limit - std::min(now, limit)) return false;
  } while (!held.compare_exchange_weak(now, now + bytes));
  return true;
}

filesystem& fs_of(fuse_req_t req) {
  filesystem& f = *static_cast<filesystem*>(fuse_req_userdata(req));
  // Every request after INIT: the kernel has applied the daemon's answer by now.
  if (!f.read_ahead_set.load(std::memory_order_acquire)) f.set_read_ahead();
  return f;
}

bool has_sidecar_suffix(const std::string& name) {
  const std::size_t n = std::strlen(sidecar_suffix);
  return name.size() > n && name.compare(name.size() - n, n, sidecar_suffix) == 0;
}

std::optional<std::pair<descriptor, fd_t>> sidecar_at(int dir_fd, const std::string& name) {
  if (!has_sidecar_suffix(name)) return std::nullopt;
  // O_PATH first: only a regular file is ever opened for reading - a FIFO, a socket or a
  // device node put there under the name is never opened by root (opening a FIFO releases
  // a writer blocked on it; a device's open can act). O_NOFOLLOW: a symlink is not one.
  const fd_t path(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!path) return std::nullopt;
  struct stat st {};
  if (::fstat(path.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  // Only the file's owner's: another user who can write the directory (a sticky /tmp-like
  // one) cannot turn someone's file into a verity file - not with a sidecar of their own,
  // nor with one the daemon wrote for a file they could write and then moved (an enable
  // gives the sidecar to the file's owner).
  {
    const std::string base = name.substr(0, name.size() - std::strlen(sidecar_suffix));
    struct stat data {};
    if (::fstatat(dir_fd, base.c_str(), &data, AT_SYMLINK_NOFOLLOW) != 0 ||
        data.st_uid != st.st_uid) {
      return std::nullopt;
    }
  }
  return open_sidecar(path.get());
}

std::optional<std::pair<descriptor, fd_t>> open_sidecar(int path_fd) {
  // The inode just checked (a /proc/self/fd reopen cannot be swapped for another).
  fd_t fd(::open(proc_path(path_fd).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) return std::nullopt;
  const auto id = verity::probe_sidecar(fd.get());
  if (!id) return std::nullopt;
  return std::make_pair(id->descriptor, std::move(fd));
}

std::optional<std::pair<descriptor, fd_t>> sidecar_of(int dir_fd, const std::string& name) {
  return sidecar_at(dir_fd, name + sidecar_suffix);
}

bool is_hidden(int dir_fd, const std::string& name) {
  if (sidecar_at(dir_fd, name)) return true;
  if (!is_kept_sidecar_name(name)) return false;
  // A kept sidecar (kept_sidecar.cpp): a regular file recognised by its content.
  const fd_t path(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  return path && ::fstat(path.get(), &st) == 0 && S_ISREG(st.st_mode) &&
         open_sidecar(path.get()).has_value();
}

namespace {

bool same_file(int a, int b) {
  struct stat sa {};
  return ::fstat(a, &sa) == 0 && fd_holds(b, sa.st_dev, sa.st_ino);
}

std::string key_of(dev_t dev, ino_t ino, const std::optional<descriptor>& desc) {
  std::string k = fmt::format("{}:{}", dev, ino);
  if (desc) k.append(reinterpret_cast<const char*>(desc->data()), desc->size());
  return k;
}

}  // namespace

int filesystem::root_fd() {
  return node_of(FUSE_ROOT_ID)->fd();
}

void filesystem::init_root() {
  fd_t fd(::open(source.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw std::system_error(errno, std::generic_category(), source.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw std::system_error(errno, std::generic_category(), source.string());
  }
  auto who = std::make_shared<identity>(st.st_dev, st.st_ino, std::move(fd));
  auto root = std::make_shared<node>();
  root->id = FUSE_ROOT_ID;
  root->who = who;
  root->type = S_IFDIR;
  root->nlookup = 1;
  quiesce::detail::lock_guard g(table);
  identities[{st.st_dev, st.st_ino}] = who;
  by_key[key_of(st.st_dev, st.st_ino, std::nullopt)] = FUSE_ROOT_ID;
  nodes[FUSE_ROOT_ID] = std::move(root);
}

std::shared_ptr<node> filesystem::node_of(fuse_ino_t id) {
  quiesce::detail::lock_guard g(table);
  const auto it = nodes.find(id);
  return it == nodes.end() ? nullptr : it->second;
}

int filesystem::lookup(const std::shared_ptr<node>& parent, const char* name,
                       std::shared_ptr<node>& out, struct stat& st) {
  if (!parent->is_dir()) return ENOTDIR;
  const std::string n = name;
  // The kernel resolves "." and ".." itself; either here would climb out of a held directory.
  if (n == "." || n == ".." || n.find('/') != std::string::npos) return EINVAL;
  if (is_hidden(parent->fd(), n)) return ENOENT;
  fd_t fd(
      ::openat(parent->fd(), name, O_PATH | (mutant::lookup_follows ? 0 : O_NOFOLLOW) | O_CLOEXEC));
  if (!fd) return errno;
  if (::fstatat(fd.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
  // Beside this name, else where the inode's record points (a hard link made in SOURCE).
  std::optional<std::pair<descriptor, fd_t>> sidecar;
  if (S_ISREG(st.st_mode)) sidecar = sidecar_of(parent->fd(), n);
  const bool by_name = sidecar.has_value();
  if (!by_name) sidecar = sidecar_by_record(fd.get(), st);
  // A sidecar found beside the name that the mount did not know the inode to have (or not
  // this sidecar file) is also recorded on the inode (keep_inode_record) - once per sidecar
  // the mount learns, not per lookup; and not by a read-only mount, which changes nothing in
  // SOURCE.
  fd_t now_known;
  out = remember(std::move(fd), st, parent, n, std::move(sidecar),
                 by_name && !read_only ? &now_known : nullptr);
  if (now_known) keep_inode_record(out->fd(), now_known.get());
  return 0;
}

std::shared_ptr<node> filesystem::remember(fd_t path, const struct stat& st,
                                           const std::shared_ptr<node>& parent,
                                           const std::string& name,
                                           std::optional<std::pair<descriptor, fd_t>> by_name,
                                           fd_t* now_known) {
  std::shared_ptr<verified_file> dropped;  // an outdated verified_file, freed unlocked
  std::shared_ptr<identity> changed;       // its old nodes' pages dropped, unlocked
  // Once the table is released: no plain read of the inode may be between its check and
  // its reply (it holds the publish lock shared: wait for them to reply - never with the
  // table held, a read of a stalled source would stall every lookup), then the pages plain
  // reads cached, never verified, are dropped from every node of the inode.
  struct invalidate_after {
    filesystem& f;
    std::shared_ptr<identity>& who;
    ~invalidate_after() {
      if (!who || mutant::no_invalidate) return;
      { std::unique_lock drained(who->publish); }
      f.invalidate(*who);
    }
  } invalidate_on_return{*this, changed};
  quiesce::detail::lock_guard g(table);
  std::shared_ptr<identity> who = identities[{st.st_dev, st.st_ino}].lock();
  if (!who) {
    who = std::make_shared<identity>(st.st_dev, st.st_ino, std::move(path));
    identities[{st.st_dev, st.st_ino}] = who;
  }
  std::optional<descriptor> desc;
  {
    quiesce::detail::lock_guard v(who->lock);
    if (by_name && who->desc != by_name->first) {
      // A sidecar under this name that the inode was not known to have (or another one):
      // from now on it is the inode's verity. Nodes of the old state answer ESTALE; plain
      // reads that check from now on read verified.
      who->desc = by_name->first;
      who->sidecar = std::move(by_name->second);
      if (now_known) *now_known = fd_t(::fcntl(who->sidecar.get(), F_DUPFD_CLOEXEC, 0));
      if (!mutant::stale_tree) dropped = std::move(who->file);
      changed = who;
    } else if (by_name && now_known && !same_file(who->sidecar.get(), by_name->second.get())) {
      // The same verity under another sidecar file (an identical copy put in its place): the
      // inode's record is pointed at the one beside the name now.
      *now_known = std::move(by_name->second);
    }
    desc = who->desc;
  }
  const std::string key = key_of(st.st_dev, st.st_ino, desc);
  std::shared_ptr<node> n;
  if (const auto it = by_key.find(key); it != by_key.end()) {
    n = nodes.at(it->second);
  } else {
    n = std::make_shared<node>();
    n->id = next_id++;
    n->who = who;
    n->type = st.st_mode & S_IFMT;
    n->desc = desc;
    by_key[key] = n->id;
    nodes[n->id] = n;
  }
  ++n->nlookup;
  if (n->id != FUSE_ROOT_ID) {
    n->parent = parent;
    n->name = name;
  }
  return n;
}

void filesystem::forget(fuse_ino_t id, std::uint64_t count) {
  std::shared_ptr<node> gone;  // freed unlocked
  quiesce::detail::lock_guard g(table);
  const auto it = nodes.find(id);
  if (it == nodes.end() || id == FUSE_ROOT_ID) return;
  node& n = *it->second;
  n.nlookup -= std::min(count, n.nlookup);
  if (n.nlookup > 0) return;
  by_key.erase(key_of(n.who->dev, n.who->ino, n.desc));
  const std::pair<dev_t, ino_t> who{n.who->dev, n.who->ino};
  gone = std::move(it->second);
  nodes.erase(it);
  // The identity goes with its last node (handles hold nodes, so none is open).
  if (gone.use_count() == 1 && gone->who.use_count() == 1) identities.erase(who);
}

void filesystem::renamed(const std::shared_ptr<node>& parent, const std::string& name,
                         const std::shared_ptr<node>& new_parent, const std::string& new_name) {
  quiesce::detail::lock_guard g(table);
  for (auto& [id, n] : nodes) {
    if (n->parent == parent && n->name == name) {
      n->parent = new_parent;
      n->name = new_name;
    }
  }
}

std::shared_ptr<verified_file> filesystem::open_charged(int data_fd, int sidecar_fd,
                                                        const descriptor& desc,
                                                        const std::string& name) {
  // The sidecar may be anyone's (sidecar_at): its tree is bounded before it is read - by
  // the descriptor it was recognised with, and by the verified_file against the one it
  // reads (rewritten since, it may describe more: EFBIG then).
  const tree_shape shape = shape_of(desc);
  if (!mutant::trees_unbounded && level0_over_cap(shape.data_size, shape.block_size, shape.alg)) {
    throw std::system_error(EFBIG, std::generic_category(),
                            fmt::format("{}: a tree of {} bytes is over this mount's cap for "
                                        "one file",
                                        name, tree_bytes_of(desc)));
  }
  const std::uint64_t bytes = mutant::trees_unbounded ? 0 : tree_bytes_of(desc);
  if (!trees->charge(bytes)) {
    throw std::system_error(ENOMEM, std::generic_category(),
                            fmt::format("{}: its tree ({} bytes) would take the trees held past "
                                        "tree_memory_mb ({} bytes); retry once files close",
                                        name, bytes, trees->limit));
  }
  // Uncharged when the file is freed, or now if it is never made.
  auto uncharge = [budget = trees, bytes](verified_file* v) {
    delete v;
    budget->uncharge(bytes);
  };
  std::unique_ptr<verified_file, decltype(uncharge)> made(nullptr, uncharge);
  try {
    made.reset(new verified_file(
        data_fd, sidecar_fd, name, *verify_wq, trust,
        mutant::trees_unbounded ? std::numeric_limits<std::uint64_t>::max() : bytes));
  } catch (...) {
    trees->uncharge(bytes);
    throw;
  }
  return std::shared_ptr<verified_file>(std::move(made));
}

std::shared_ptr<verified_file> filesystem::verity_file(identity& who) {
  if (!who.desc) return nullptr;
  // A kept file (retained.hpp) serves only the descriptor it was read for: remember()
  // drops it when the inode's verity changes.
  if (who.file && !mutant::stale_tree && who.file->descriptor() != *who.desc) {
    throw std::system_error(ESTALE, std::generic_category(), "a kept tree of another descriptor");
  }
  if (!who.file) {
    // The data through the held inode, never a path: a file renamed or replaced since is
    // not what opens.
    fd_t data(
        ::open(proc_path(who.path_fd.get()).c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!data) throw std::system_error(errno, std::generic_category(), "verity file");
    auto v = open_charged(data.get(), who.sidecar.get(), *who.desc,
                          fmt::format("inode {}:{}", who.dev, who.ino));
    // The sidecar may have been rewritten in place since it was recognised.
    if (v->descriptor() != *who.desc) {
      throw std::system_error(ESTALE, std::generic_category(),
                              "the sidecar changed since it was looked up");
    }
    who.file = std::move(v);
  }
  return who.file;
}

void filesystem::invalidate(const identity& who) {
  std::vector<fuse_ino_t> ids;
  {
    quiesce::detail::lock_guard g(table);
    for (const auto& [id, n] : nodes) {
      if (n->who.get() == &who) ids.push_back(id);
    }
  }
  for (const fuse_ino_t id : ids)
    fuse_lowlevel_notify_inval_inode(se, id, 0, 0);
}

void filesystem::drop_handles() {
  std::set<handle*> left;
  {
    quiesce::detail::lock_guard g(table);
    left.swap(handles);
  }
  for (handle* h : left)
    delete h;
}

void filesystem::drop_files() {
  retained.clear();
  std::vector<std::shared_ptr<identity>> known;
  {
    quiesce::detail::lock_guard g(table);
    for (const auto& [id, n] : nodes)
      known.push_back(n->who);
  }
  for (const auto& who : known) {
    std::shared_ptr<verified_file> file;  // freed unlocked
    quiesce::detail::lock_guard v(who->lock);
    file = std::move(who->file);
  }
}

}  // namespace quiesce::mount::detail
