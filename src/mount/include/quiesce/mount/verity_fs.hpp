// SPDX-License-Identifier: Apache-2.0
// quiesce verity mount: fs-verity for any filesystem, through the kernel's FUSE driver.
// SOURCE is shown at MOUNTPOINT (libfuse3, low-level API) as a whole filesystem - lookup,
// getattr/setattr (chmod, chown, truncate, utimens), readlink, mknod/mkfifo, mkdir, rmdir,
// symlink, link, unlink, rename (RENAME_NOREPLACE, RENAME_EXCHANGE), statfs, xattrs,
// readdir, open/create/read/write/flush/fsync/fsyncdir, fallocate, copy_file_range, lseek -
// and with fs-verity:
//  - a file with a sidecar (FILE.verity, as `quiesce verity enable` or an enable through the
//    mount writes it) is a verity file: every byte a read returns was verified against its
//    Merkle tree first. The FUSE thread that receives the read reads the blocks and queues
//    their verification on the verification workqueue, whose work item sends the reply
//    (verified_file::read_async), as the kernel's bio completion queues verification and
//    the work item ends the bio. A read covering a bad block fails whole with EIO (never
//    short) and one line is logged naming the file and block.
//  - ioctls, so fsverity-utils works unmodified: FS_IOC_MEASURE_VERITY, FS_IOC_ENABLE_VERITY
//    (the kernel's rules and errno values, docs/mount.md), FS_IOC_GETFLAGS (FS_VERITY_FL);
//    FS_IOC_READ_VERITY_METADATA is EOPNOTSUPP (its argument points into the caller's
//    memory, which a restricted FUSE ioctl cannot write through).
//  - trust: with certificates, a verity file's built-in signature (if any) must verify;
//    with require_signatures, a verity file without a valid one cannot be opened (EPERM)
//    and enabling without a signature fails. Without either, a verity file is checked
//    against its own sidecar: reads match the digest `fsverity measure` reports.
//
// Threat model (docs/mount.md has how each is kept): the daemon runs as root with
// allow_other and every local user is a client; users may own directories inside SOURCE
// and change them while it is mounted. No operation reaches a file outside SOURCE (names
// are resolved once, relative to held descriptors, never followed); operations run with
// the caller's filesystem ids, groups and no capabilities; a verity file is an inode
// property, has no writer under any name, and every byte read from it was verified against
// its tree in the digest that open reports - whatever another writer, a mapping, the page
// cache, a hard link or a race with enable did; teardown answers every request handed to
// the verification queue before the session goes.
//
// Protection legend: src/mount/fs.hpp.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::mount {

struct verity_mount_options {
  bool unbound = false;  // the pre-patch queue (unbound | highpri), else the patch's
  bool require_signatures = false;
  std::vector<std::filesystem::path> certs;  // trusted certificates (PEM)
  bool foreground = true;                    // serve in the caller's process (else daemonize)
  bool debug = false;                        // libfuse's request log on stderr
  bool handle_signals = true;  // SIGINT, SIGTERM and SIGHUP end serve() (libfuse's handlers)
  bool read_only = false;      // -o ro: EROFS for every change (the kernel's), enable too
  // Other users may use the mount (FUSE's allow_other). Default: when the daemon is root.
  // A non-root daemon may ask for it only where /etc/fuse.conf says user_allow_other.
  std::optional<bool> allow_other;
  // A daemon that dies without unmounting (SIGKILL, a crash) leaves no mount: serve()
  // forks a watcher process that unmounts it once the daemon has gone and the mount answers
  // ENOTCONN, and that ends when serve() returns (not libfuse's auto_unmount, whose
  // fusermount3 may look too early).
  bool auto_unmount = true;
  // Mount flags passed to the kernel as given: nosuid, nodev, noexec, noatime, ...
  std::vector<std::string> mount_flags;
  // The mount's readahead window in KiB (its bdi's read_ahead_kb), set by a root daemon
  // once the kernel has the mount; 0 leaves the kernel's 128 KiB. FUSE lets a daemon only
  // lower it, and a sequential read through the mount runs at the window's depth: 4 MiB
  // read 256 MiB cold in half the time 128 KiB took (docs/mount.md, "At FUSE speed").
  unsigned read_ahead_kb = 4096;
  // -o tree_memory_mb=N: the MiB the Merkle trees of the verity files open (and kept for
  // their next open) may hold at once. A verity file's tree is read whole at open, and
  // sidecars in SOURCE are written by its users, so this bounds what they can make the
  // daemon allocate; an open past it answers ENOMEM until files close. One file's tree is
  // capped apart from it (level-0 hashes of 256 MiB: a 32 GiB file with 4 KiB blocks and
  // SHA-256; EFBIG beyond, for enable and open alike).
  unsigned tree_memory_mb = 1024;
  // --stats FILE, -o stats=FILE: the mount's counters - per file its verified reads, bytes
  // and EIO replies, plain reads, the verification queue's queue->start percentiles - as
  // one JSON object written to FILE (absolute) every second while it serves and at its
  // end (through FILE.tmp and a rename). Empty: none.
  std::filesystem::path stats_file;
};

// The largest -o read_ahead_kb= accepted (1 GiB).
inline constexpr unsigned max_read_ahead_kb = 1u << 20;
// The largest -o tree_memory_mb= accepted (1 TiB); the smallest is 1.
inline constexpr unsigned max_tree_memory_mb = 1u << 20;

// Parses one `-o` argument (comma-separated, as mount(8) and mount.fuse3 pass it) into `o`:
// ro, rw, allow_other, default_permissions (always on), cert=FILE, require_signatures,
// unbound, read_ahead_kb=N (0 .. max_read_ahead_kb), tree_memory_mb=N (1 ..
// max_tree_memory_mb), stats=FILE (made absolute here),
// auto_unmount, noauto_unmount, debug,
// the kernel's generic flags (suid, nosuid,
// dev, nodev, exec, noexec, atime, noatime, diratime, nodiratime, relatime, norelatime,
// strictatime, sync, async, dirsync, lazytime), and what fstab and mount(8) hand helpers
// and mean nothing here (defaults, auto, noauto, user, nouser, users, _netdev, nofail,
// x-*, comment=*). Throws mount_error (exit 2) naming anything else.
void parse_mount_options(const std::string& list, verity_mount_options& o);

// A mount that cannot be set up; `exit_code` 2 for the caller's mistakes (a missing
// /dev/fuse, a missing or non-empty mountpoint, SOURCE not a directory, no permission).
struct mount_error : std::runtime_error {
  mount_error(const std::string& what, int exit_code)
      : std::runtime_error(what), exit_code(exit_code) {}
  int exit_code;
};

// Why `source` cannot be served at `mountpoint` (nullopt: it can be tried). Checked before
// anything is mounted.
std::optional<std::string> verity_mount_refusal(const std::filesystem::path& source,
                                                const std::filesystem::path& mountpoint);

// A mounted filesystem. The constructor mounts (throws mount_error) and starts no thread;
// serve() starts the verification queues and answers requests on libfuse's threads until
// the filesystem is unmounted (fusermount3 -u, umount, unmount() from another thread, or -
// with handle_signals - SIGINT, SIGTERM or SIGHUP). Teardown, in this order: libfuse's
// threads end; every read handed to the verification queue is answered; the handles still
// open are freed; the queues stop; the filesystem is unmounted and only then the session
// destroyed - no reply is ever sent on a destroyed session. The destructor unmounts if
// serve() did not.
class verity_mount {
 public:
  verity_mount(const std::filesystem::path& source, const std::filesystem::path& mountpoint,
               const verity_mount_options& o);
  ~verity_mount();
  verity_mount(const verity_mount&) = delete;
  verity_mount& operator=(const verity_mount&) = delete;
  // `progress` (if set) is called in this process as serving is set up: with 'W' once the
  // auto_unmount watcher exists (never when it is off or could not start), then with 'R'
  // once the queues are up, just before the loop.
  void serve(const std::function<void(char)>& progress = {});
  // Ends serve(): a lazy unmount (the connection ends once the last open file closes).
  void unmount();
  // The verification queue (its stats: queue->start, the workers' run delay).
  workqueue& verify_queue();

 private:
  // Daemonizes: its parent process lets go of the connection, or unmounts for a child that
  // ended before it served.
  friend void serve_verity_mount(const std::filesystem::path& source,
                                 const std::filesystem::path& mountpoint,
                                 const verity_mount_options& o,
                                 const std::function<void()>& mounted);
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Leaves on `file`'s inode the record that makes every name of it a verity file to a mount
// (src/mount/inode_record.cpp: the attribute trusted.quiesce.verity, a file handle of
// `sidecar`). What an enable through the mount does, for `quiesce verity enable` run by
// root. False where it cannot (not root; a filesystem without trusted.* attributes or file
// handles): the sidecar beside the name still makes that name a verity file.
bool record_verity_on_inode(const std::filesystem::path& file,
                            const std::filesystem::path& sidecar);

// Mounts and serves until unmounted (or a signal, as above); `mounted` (if set) is called
// once the mount is in place. Unless o.foreground, the process then daemonizes (as sshfs
// does): a child, in a session of its own, sets up serving - its auto_unmount watcher first
// - and only then puts its standard streams on /dev/null and tells the caller's process,
// which exits 0 (so, with auto_unmount on and its watcher started, a daemon killed at any
// time after the command returned leaves no mount). For a child that ends before that (an
// error is on the caller's stderr) the caller's process throws mount_error, after taking
// away the dead mount of a child killed before its watcher existed. Throws mount_error.
void serve_verity_mount(const std::filesystem::path& source,
                        const std::filesystem::path& mountpoint, const verity_mount_options& o,
                        const std::function<void()>& mounted = {});

}  // namespace quiesce::mount
