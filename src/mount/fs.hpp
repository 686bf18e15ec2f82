// SPDX-License-Identifier: Apache-2.0
// The state of the FUSE filesystem behind `quiesce verity mount` (internal to src/mount):
// source inodes (identity), the nodes the kernel knows (an identity shown in one verity
// state), open handles, and running an operation as the request's caller.
//
// Security model (the threat model in verity_fs.hpp): every name is resolved once,
// relative to a held O_PATH descriptor of its directory, without following symlinks; an
// operation on a node reaches the inode that descriptor holds, never a path rebuilt later.
// Verity is a property of the inode (dev, ino): a sidecar found under any of its names, or
// an enable through the mount, makes every name of it a verity file.
//
// Page-cache invariant: a node is (identity, verity descriptor or none), and the kernel
// keeps one page cache per node. A verity node's handles read only through its descriptor's
// verified_file, so every page of a verity node's cache was verified against that
// descriptor: its opens may keep the cache (keep_cache). A plain node's cache may hold
// unverified pages; it is dropped at every open, and after an enable turns its inode into a
// verity file (notify_inval_inode) - from then on its handles' reads are verified too. When
// the inode's verity changes, lookups give a new node, and an open of a node whose state
// is no longer the inode's answers ESTALE (the kernel then looks the name up again).
//
// Protection legend (docs/DESIGN.md): I (set before the node or filesystem is shared), A,
// L(lock) - QUIESCE_GUARDED_BY where the lock is a member of the same object: here
// L(table) is filesystem::table, L(who->lock) the node's identity's lock. Lock order: table, then
// an identity's publish lock, then its lock. No lock is held across a call into libfuse
// that waits for the kernel (notify_inval_inode), nor across building a tree.
#pragma once

#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../base/mutex.hpp"
#include "quiesce/mount/verity_fs.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "retained.hpp"
#include "stats.hpp"

namespace quiesce::mount::detail {

using verity::verified_file;
using descriptor = std::array<std::uint8_t, 256>;  // sig_size zeroed

// An owned descriptor.
class fd_t {
 public:
  fd_t() = default;
  explicit fd_t(int fd) noexcept : fd_(fd) {}
  fd_t(fd_t&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_t& operator=(fd_t&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  fd_t(const fd_t&) = delete;
  fd_t& operator=(const fd_t&) = delete;
  ~fd_t() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// "/proc/self/fd/N": reopens the inode `fd` holds (a magic link, not a path walk).
std::string proc_path(int fd);

// ---- inode identity: the one (st_dev, st_ino) comparison of the module ---------------------
inline bool is_inode(const struct stat& st, dev_t dev, ino_t ino) {
  return st.st_dev == dev && st.st_ino == ino;
}
// Whether `fd` holds the inode (dev, ino).
bool fd_holds(int fd, dev_t dev, ino_t ino);
// Whether `name` in `dir_fd`, not followed, is the inode (dev, ino) now; `st` (if given)
// receives what the name is.
bool name_holds(int dir_fd, const std::string& name, dev_t dev, ino_t ino,
                struct stat* st = nullptr);

// Calls `fn` for each entry of the directory `dir_fd` holds, from its start (through a
// descriptor of its own: dir_fd's offset is left as it is). 0, or the errno of the opening.
int for_each_entry(int dir_fd, const std::function<void(const dirent&)>& fn);

// ---- what trees may cost -----------------------------------------------------------------
// A verity file's tree is held whole in memory: enable builds it there, and an open reads
// it from the sidecar (verified_file). Sidecars found in SOURCE are written by users, so the
// daemon bounds both one tree and all of them, whoever wrote the sidecar.

// Level-0 hashes one tree may have: 256 MiB, a 32 GiB file with 4 KiB blocks and SHA-256.
// An enable or an open beyond it answers EFBIG.
inline constexpr std::uint64_t max_level0_bytes = std::uint64_t{256} << 20;
bool level0_over_cap(std::uint64_t data_size, std::uint64_t block_size, verity::hash_alg alg);
// The bytes of every level of the tree a (valid) descriptor implies.
std::uint64_t tree_bytes_of(const descriptor& d);
// The tree bytes the verity files open or kept at once hold, and their limit
// (verity_mount_options::tree_memory_mb): charged before a tree is read, uncharged when its
// file is freed (shared: a file may outlive the filesystem object at teardown). An open that
// would pass the limit answers ENOMEM until files close (kept ones are let go first).
struct tree_budget {
  explicit tree_budget(std::uint64_t max) : limit(max) {}
  const std::uint64_t limit;           // I
  std::atomic<std::uint64_t> held{0};  // A (seq_cst)
  // Takes `bytes` if held stays within the limit; false (nothing taken) otherwise.
  bool charge(std::uint64_t bytes) noexcept;
  void uncharge(std::uint64_t bytes) noexcept { held.fetch_sub(bytes); }
};

// One source inode, shared by the nodes that show it.
struct identity {
  identity(dev_t d, ino_t i, fd_t path) : dev(d), ino(i), path_fd(std::move(path)) {}
  const dev_t dev;     // I
  const ino_t ino;     // I
  const fd_t path_fd;  // I: O_PATH|O_NOFOLLOW

  quiesce::detail::mutex lock{"mount identity::lock"};
  // The verity the inode is known to have (a sidecar found under one of its names, or an
  // enable through the mount) and an open descriptor of that sidecar.
  std::optional<descriptor> desc QUIESCE_GUARDED_BY(lock);
  fd_t sidecar QUIESCE_GUARDED_BY(lock);
  // Its verified_file while handles of the inode are open (shared by their reads), and
  // after the last close while the mount retains it (retained.hpp).
  std::shared_ptr<verified_file> file QUIESCE_GUARDED_BY(lock);
  int opens QUIESCE_GUARDED_BY(lock) = 0;    // handles open, any node
  int writers QUIESCE_GUARDED_BY(lock) = 0;  // writable handles (a mapping holds one)
  bool enabling QUIESCE_GUARDED_BY(lock) = false;
  // Plain reads hold it shared from their check to their reply; an enable holds it
  // exclusively to publish the inode's verity, so no plain read is in flight afterwards.
  std::shared_mutex publish;
};

// A node the kernel knows: an identity in one verity state.
struct node {
  fuse_ino_t id = 0;               // I
  std::shared_ptr<identity> who;   // I
  mode_t type = 0;                 // I: S_IFMT bits
  std::optional<descriptor> desc;  // I: the verity this node shows (none: plain)
  std::uint64_t nlookup = 0;       // L(table)
  // The name it was last looked up, created or renamed under (enable places the sidecar
  // next to it).
  std::shared_ptr<node> parent;  // L(table)
  std::string name;              // L(table)
  int fd() const noexcept { return who->path_fd.get(); }
  bool is_dir() const noexcept { return S_ISDIR(type); }
  bool is_reg() const noexcept { return S_ISREG(type); }
};

// One open file.
struct handle {
  std::shared_ptr<node> n;  // I
  fd_t fd;                  // I
  int flags = 0;            // I: the open's flags
  bool writable = false;    // I: counted in the identity's writers
  // Set at the open of a verity node, or at the first read after the inode became a
  // verity file; then never changed.
  std::shared_ptr<verified_file> verity;  // L(n->who->lock)
  file_counters* counters = nullptr;      // I: its inode's, in filesystem::stats
};

// An open directory: its descriptor and a snapshot of its entries (sidecars left out).
struct dir_handle {
  fd_t fd;
  struct entry {
    std::string name;
    mode_t type;
    ino_t ino;
  };
  std::vector<entry> entries;
};

struct filesystem {
  std::filesystem::path source;          // I
  verity::trust_policy trust;            // I
  bool require_signatures = false;       // I
  bool read_only = false;                // I
  bool switch_creds = false;             // I: root daemon: operations run as their caller
  std::unique_ptr<workqueue> verify_wq;  // I: reads (the seed's queue)
  std::unique_ptr<workqueue> enable_wq;  // I: tree building for FS_IOC_ENABLE_VERITY
  fuse_session* se = nullptr;            // I
  // The verified_files of closed verity inodes, for their next open: at most 256 inodes
  // and 64 MiB of trees (8 GiB of data in 4 KiB sha256 blocks).
  retained_files retained{256, std::size_t{64} << 20};
  // The tree bytes of every verified_file alive (open or kept), within their limit.
  std::shared_ptr<tree_budget> trees;  // I
  mount_stats stats;                   // its own lock; --stats FILE writes it

  // The mount's readahead window (verity_mount_options::read_ahead_kb), written to its
  // bdi by the first request after INIT (before, the kernel's INIT would lower it again).
  std::string read_ahead_file;              // I: the bdi's read_ahead_kb; empty: left alone
  unsigned read_ahead_kb = 0;               // I
  std::atomic<bool> read_ahead_set{false};  // A
  void set_read_ahead();

  quiesce::detail::mutex table{"mount filesystem::table"};
  std::unordered_map<fuse_ino_t, std::shared_ptr<node>> nodes QUIESCE_GUARDED_BY(table);
  std::map<std::string, fuse_ino_t> by_key QUIESCE_GUARDED_BY(table);
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<identity>> identities QUIESCE_GUARDED_BY(table);
  std::set<handle*> handles QUIESCE_GUARDED_BY(table);  // open, for teardown
  fuse_ino_t next_id QUIESCE_GUARDED_BY(table) = FUSE_ROOT_ID + 1;

  // Sets up the root node: `source`'s O_PATH descriptor. Throws std::system_error.
  void init_root();
  int root_fd();  // SOURCE's O_PATH descriptor (the root node's)
  std::shared_ptr<node> node_of(fuse_ino_t id);
  // Resolves `name` in `parent` (O_PATH|O_NOFOLLOW), decides its verity state, and
  // remembers the node (nlookup + 1). 0 or an errno; `st` gets the source's attributes.
  int lookup(const std::shared_ptr<node>& parent, const char* name, std::shared_ptr<node>& out,
             struct stat& st);
  // Remembers the inode open at `path` (its O_PATH descriptor) as `parent`/`name`, in the
  // verity state the sidecar `by_name` (if any) or the inode's known verity gives it. Where
  // `by_name` is new to the inode (the mount did not know the inode's verity, knew another,
  // or knew it from another sidecar file) and `now_known` is given, it gets a descriptor of
  // that sidecar.
  std::shared_ptr<node> remember(fd_t path, const struct stat& st,
                                 const std::shared_ptr<node>& parent, const std::string& name,
                                 std::optional<std::pair<descriptor, fd_t>> by_name,
                                 fd_t* now_known = nullptr);
  void forget(fuse_ino_t id, std::uint64_t n);
  // Where a name moved (rename): nodes last seen under the old name follow it.
  void renamed(const std::shared_ptr<node>& parent, const std::string& name,
               const std::shared_ptr<node>& new_parent, const std::string& new_name);
  // The verified_file of `who`'s known verity, opened if needed (under its lock).
  std::shared_ptr<verified_file> verity_file(identity& who) QUIESCE_REQUIRES(who.lock);
  // A verified_file of the data and sidecar descriptors, whose sidecar was recognised with
  // `desc`: its tree within the cap for one file (EFBIG) and charged to `trees` (ENOMEM
  // past tree_memory_mb) until the file is freed. Every verified_file of the mount is made
  // here. Throws std::system_error as verified_file's constructor does.
  std::shared_ptr<verified_file> open_charged(int data_fd, int sidecar_fd, const descriptor& desc,
                                              const std::string& name);
  // Drops the page cache of every node of `who` (after its verity changed).
  void invalidate(const identity& who);
  // Frees every handle still open (teardown, after the queues are idle).
  void drop_handles();
  // Frees every verified_file (teardown, after drop_handles, before the queues go).
  void drop_files();
};

filesystem& fs_of(fuse_req_t req);

// ---- names -----------------------------------------------------------------------------

inline constexpr const char* sidecar_suffix = ".verity";
bool has_sidecar_suffix(const std::string& name);
// The sidecar named `name` in the directory `dir_fd`, recognised by its content
// (verity::probe_sidecar) and owned by the owner of the file it belongs
// to: its descriptor and an open (read-only) descriptor. Never blocks, never follows a
// symlink.
std::optional<std::pair<descriptor, fd_t>> sidecar_at(int dir_fd, const std::string& name);
// A sidecar `path_fd` holds (O_PATH; a regular file its caller checked): opened for reading
// through it and recognised by its content.
std::optional<std::pair<descriptor, fd_t>> open_sidecar(int path_fd);
// The sidecar the inode record of the file `path_fd` holds points to (inode_record.cpp),
// held to what a sidecar found by name is: a regular file, on the data's filesystem, the
// data's owner's, recognised by its content. nullopt without a record (or one that fails).
std::optional<std::pair<descriptor, fd_t>> sidecar_by_record(int path_fd, const struct stat& data);
// Leaves the inode record on the file `data_fd` (open for reading: not O_PATH, which
// open_by_handle_at does not take) pointing to the sidecar `sidecar_fd`: false where it
// cannot (no trusted.* attributes on the source's filesystem, no file handles it can
// decode, not root) - the sidecar beside the name still works there.
bool record_verity_on_inode(int data_fd, int sidecar_fd);
// Whether the source can keep an inode record for the file `path_fd` (O_PATH, regular):
// trusted.* attributes, and file handles this daemon can decode. What an enable of a file
// with more than one name needs (ops_verity.cpp).
bool can_keep_inode_record(int path_fd);
// Makes the inode record of the file `path_fd` (O_PATH, a regular file) point to
// `sidecar_fd`, the sidecar found beside one of its names, where it does not already: a file
// enabled before records existed, or by hand in SOURCE, gets one the first time a mount sees
// it by that name, and its other names - hard links made in SOURCE - are verity files to
// every mount from then on. Written only where it differs; silent where the source cannot
// keep one. A lookup calls it when the mount learns the inode's verity by that name (once
// per mount and verity, not per lookup).
void keep_inode_record(int path_fd, int sidecar_fd);
// The sidecar of the file `name` in `dir_fd` (name + ".verity").
std::optional<std::pair<descriptor, fd_t>> sidecar_of(int dir_fd, const std::string& name);
// A name the mount keeps for itself: an existing sidecar, or a kept one (below).
bool is_hidden(int dir_fd, const std::string& name);

// ---- a name that goes away: its sidecar (kept_sidecar.cpp) ------------------------------
// fs-verity belongs to the inode: removing one name of a verity file (unlink, or a rename
// over it) must not make its other names - hard links made in SOURCE, found through the
// inode record - plain. So the sidecar beside a removed name is kept while the file has
// other names and its record points to that sidecar: renamed, in the same directory, to
// ".quiesce-kept.<16 random hex digits>.verity-kept" (never over an existing name), a name
// the mount hides as it hides sidecars and that no data file's sidecar name can be. It is
// removed with the file's last name, wherever that name is: the inode carries a handle of
// the kept sidecar's directory (note_kept_directory), which the last name's removal
// follows where it lies within SOURCE (kept_directory).
bool is_kept_sidecar_name(const std::string& name);
// Records on the regular file `path_fd` that its sidecar was kept in the directory `dir_fd`
// (trusted.quiesce.kept-in, a handle). False where that cannot be written.
bool note_kept_directory(int path_fd, int dir_fd);
// The directory the file's sidecar was kept in, if recorded and within SOURCE (`root_fd`).
fd_t kept_directory(int path_fd, int root_fd);
// What a regular file's name that is about to be removed leaves behind, taken before the
// removal: the file (O_PATH) and the sidecar beside the name, if any.
struct leaving_name {
  fd_t data;    // none: not a regular file (or gone already)
  fd_t beside;  // the sidecar beside the name (recognised as sidecar_of does), if any
};
leaving_name before_name_removed(int dir_fd, const std::string& name);
// After `name` was removed from `dir_fd` (no-op if it still names the same file): its
// sidecar kept or removed, and a kept sidecar - here, or where it was kept within SOURCE
// (`root_fd`) - removed with the file's last name.
void after_name_removed(int dir_fd, const std::string& name, const leaving_name& gone, int root_fd);

// ---- the caller ------------------------------------------------------------------------

// While alive, this thread's filesystem uid, gid and supplementary groups are the
// request's caller's, with no capability in effect: the source filesystem checks the
// operation as it would the caller's own, and what it creates is the caller's. Nothing
// when the daemon is not root or the caller is root. A switch that cannot be made or
// undone aborts: a thread left with the wrong identity must not serve another request.
class as_caller {
 public:
  explicit as_caller(fuse_req_t req);
  ~as_caller();
  as_caller(const as_caller&) = delete;
  as_caller& operator=(const as_caller&) = delete;
  // Whether the caller may write the inode held by `path_fd` (the kernel's
  // file_permission(MAY_WRITE)): 0 or EACCES/EPERM/EROFS.
  int may_write(int path_fd) const;

 private:
  bool switched_ = false;
};

// Before a write, an allocation or a copy into `fd` that the daemon makes with its own
// authority on behalf of the request's caller: drops the file's set-group-ID bit where the
// kernel would for the caller (setattr_should_drop_sgid, Linux 6.2+: a writer outside the
// file's group and without CAP_FSETID drops it even when the group may not execute the
// file). The kernel's FUSE client sends the kill-priv mode change by the older rule (only
// with group execute; set-user-ID always), so the mount completes it here. A caller that
// is root, or a daemon that does not switch identities (not root), drops nothing here.
// 0, or the error that fails the operation (as the kernel's: an append-only file, EPERM).
int drop_sgid_for_caller(fuse_req_t req, int fd);

// ---- a daemon that dies without unmounting (auto_unmount.cpp) -----------------------------
// Forks a watcher that waits until this process has ended (its pidfd: every thread gone,
// /dev/fuse closed) and then, if the mount on `name` in the directory `dir` (O_PATH, opened
// before the mount) answers ENOTCONN, unmounts it lazily: itself (root, `fusermount` empty)
// or through `fusermount` (the setuid fusermount3, for a user's mount, given `path`). 0, or
// the errno of what failed (pidfd_open, socketpair, fcntl, fork). `done` receives the
// descriptor that end_auto_unmount() takes, none if no watcher started.
int start_auto_unmount(int dir, const std::string& name, const std::string& path,
                       const std::string& fusermount, fd_t& done);
// Serving has ended (the mount is gone): the watcher ends, without looking unless it sees
// the daemon's end at the same time. Closes `done`; nothing if it holds none.
void end_auto_unmount(fd_t& done);

// ---- operations (ops_*.cpp) --------------------------------------------------------------

fuse_entry_param entry_of(const node& n, const struct stat& st);
constexpr double attr_timeout = 1.0;  // seconds, attributes and names

void op_lookup(fuse_req_t, fuse_ino_t, const char*);
void op_forget(fuse_req_t, fuse_ino_t, std::uint64_t);
void op_forget_multi(fuse_req_t, std::size_t, fuse_forget_data*);
void op_getattr(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_setattr(fuse_req_t, fuse_ino_t, struct stat*, int, fuse_file_info*);
void op_readlink(fuse_req_t, fuse_ino_t);
void op_mknod(fuse_req_t, fuse_ino_t, const char*, mode_t, dev_t);
void op_mkdir(fuse_req_t, fuse_ino_t, const char*, mode_t);
void op_symlink(fuse_req_t, const char*, fuse_ino_t, const char*);
void op_link(fuse_req_t, fuse_ino_t, fuse_ino_t, const char*);
void op_unlink(fuse_req_t, fuse_ino_t, const char*);
void op_rmdir(fuse_req_t, fuse_ino_t, const char*);
void op_rename(fuse_req_t, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned);
void op_statfs(fuse_req_t, fuse_ino_t);
void op_setxattr(fuse_req_t, fuse_ino_t, const char*, const char*, std::size_t, int);
void op_getxattr(fuse_req_t, fuse_ino_t, const char*, std::size_t);
void op_listxattr(fuse_req_t, fuse_ino_t, std::size_t);
void op_removexattr(fuse_req_t, fuse_ino_t, const char*);
void op_opendir(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_readdir(fuse_req_t, fuse_ino_t, std::size_t, off_t, fuse_file_info*);
void op_releasedir(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_fsyncdir(fuse_req_t, fuse_ino_t, int, fuse_file_info*);

void op_open(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_create(fuse_req_t, fuse_ino_t, const char*, mode_t, fuse_file_info*);
void op_read(fuse_req_t, fuse_ino_t, std::size_t, off_t, fuse_file_info*);
void op_write(fuse_req_t, fuse_ino_t, const char*, std::size_t, off_t, fuse_file_info*);
void op_flush(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_fsync(fuse_req_t, fuse_ino_t, int, fuse_file_info*);
void op_release(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_fallocate(fuse_req_t, fuse_ino_t, int, off_t, off_t, fuse_file_info*);
void op_copy_file_range(fuse_req_t, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t,
                        fuse_file_info*, std::size_t, int);
void op_lseek(fuse_req_t, fuse_ino_t, off_t, int, fuse_file_info*);

void op_ioctl(fuse_req_t, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*,
              std::size_t, std::size_t);

}  // namespace quiesce::mount::detail
