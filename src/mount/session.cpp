// SPDX-License-Identifier: Apache-2.0
// The session of `quiesce verity mount` (verity_fs.hpp): options, mounting, serving,
// unmounting and the teardown order; the operations table.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "fs.hpp"
#include "mutant.hpp"
#include "quiesce/log.hpp"
#include "quiesce/topology.hpp"

extern char** environ;

namespace quiesce::mount {

namespace fs = std::filesystem;
using namespace detail;

namespace {

void op_init(void* userdata, fuse_conn_info* conn) {
  (void)userdata;
  // The kernel may send several lookups and readdirs of one directory at once.
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
}

const fuse_lowlevel_ops verity_fs_ops = [] {
  fuse_lowlevel_ops o{};
  o.init = op_init;
  o.lookup = op_lookup;
  o.forget = op_forget;
  o.forget_multi = op_forget_multi;
  o.getattr = op_getattr;
  o.setattr = op_setattr;
  o.readlink = op_readlink;
  o.mknod = op_mknod;
  o.mkdir = op_mkdir;
  o.symlink = op_symlink;
  o.link = op_link;
  o.unlink = op_unlink;
  o.rmdir = op_rmdir;
  o.rename = op_rename;
  o.statfs = op_statfs;
  o.setxattr = op_setxattr;
  o.getxattr = op_getxattr;
  o.listxattr = op_listxattr;
  o.removexattr = op_removexattr;
  o.opendir = op_opendir;
  o.readdir = op_readdir;
  o.releasedir = op_releasedir;
  o.fsyncdir = op_fsyncdir;
  o.open = op_open;
  o.create = op_create;
  o.read = op_read;
  o.write = op_write;
  o.flush = op_flush;
  o.fsync = op_fsync;
  o.release = op_release;
  o.fallocate = op_fallocate;
  o.copy_file_range = op_copy_file_range;
  o.lseek = op_lseek;
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

// An option value inside libfuse's -o list: commas and backslashes escaped.
std::string escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

bool user_allow_other() {
  std::ifstream in("/etc/fuse.conf");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("user_allow_other", 0) == 0) return true;
  }
  return false;
}

// Runs fusermount3 -u -z MOUNTPOINT (no shell); true if it succeeded.
bool fusermount_unmount(const fs::path& mountpoint) {
  std::vector<std::string> args{"fusermount3", "-u", "-z", "-q", mountpoint.string()};
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "fusermount3", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The setuid fusermount3 a user mounts (and unmounts) through; empty if there is none.
std::string setuid_fusermount() {
  for (const char* p : {"/usr/bin/fusermount3", "/bin/fusermount3", "/usr/local/bin/fusermount3"}) {
    struct stat st {};
    if (::stat(p, &st) == 0 && (st.st_mode & S_ISUID) && st.st_uid == 0) return p;
  }
  return {};
}

}  // namespace

namespace {

// Every node the kernel knows holds an O_PATH descriptor of its inode until the kernel
// forgets it, and the kernel forgets only under memory pressure: any user who stats enough
// files would otherwise exhaust a soft limit of 1,024 for every user of the mount (EMFILE
// on every later lookup and open). The soft limit goes up to the hard one, as libfuse's
// passthrough examples do; what is left is the hard limit, which only root raises.
void raise_descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  const rlim_t was = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    log(log_level::warning, fmt::format("quiesce verity mount: cannot raise the descriptor "
                                        "limit from {}: {}",
                                        was, std::strerror(errno)));
  }
}

// A root daemon writes users' data (write, fallocate, copy_file_range on a descriptor it
// opened as them) with its own credentials: CAP_SYS_RESOURCE would let those writes past
// disk quotas and into the blocks a filesystem reserves for root. The daemon needs it for
// nothing, so it leaves its effective set before any thread starts (threads inherit it;
// the permitted set keeps it for a program that serves a mount in-process).
void drop_sys_resource() {
  __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &head, data) != 0) return;
  data[CAP_SYS_RESOURCE / 32].effective &= ~(1u << (CAP_SYS_RESOURCE % 32));
  head = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (::syscall(SYS_capset, &head, data) != 0) {
    throw mount_error(fmt::format("cannot drop CAP_SYS_RESOURCE: {}", std::strerror(errno)), 1);
  }
}

// The device ("major:minor") of the filesystem mounted last on `mnt`, from
// /proc/self/mountinfo (whose paths escape space, tab, newline and backslash as \ooo).
std::optional<std::string> mounted_device(const fs::path& mnt) {
  std::ifstream in("/proc/self/mountinfo");
  std::optional<std::string> dev;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, at;
    if (!(fields >> id >> parent >> devno >> root >> at)) continue;
    std::string path;
    for (std::size_t i = 0; i < at.size(); ++i) {
      if (at[i] == '\\' && i + 3 < at.size()) {
        path += static_cast<char>(std::stoi(at.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        path += at[i];
      }
    }
    if (path == mnt.string()) dev = devno;
  }
  return dev;
}

}  // namespace

void filesystem::set_read_ahead() {
  if (read_ahead_set.exchange(true, std::memory_order_acq_rel) || read_ahead_file.empty()) return;
  std::ofstream out(read_ahead_file);
  out << read_ahead_kb << '\n';
  out.flush();
  if (!out) {
    log(log_level::warning,
        fmt::format("quiesce verity mount: cannot set {} to {} (readahead stays the kernel's)",
                    read_ahead_file, read_ahead_kb));
  }
}

void parse_mount_options(const std::string& list, verity_mount_options& o) {
  static const char* const flag_options[] = {
      "suid",        "nosuid",  "dev",      "nodev",      "exec",     "noexec",
      "atime",       "noatime", "diratime", "nodiratime", "relatime", "norelatime",
      "strictatime", "sync",    "async",    "dirsync",    "lazytime"};
  static const char* const ignored_options[] = {"defaults", "auto",  "noauto",  "user",
                                                "nouser",   "users", "_netdev", "nofail"};
  std::size_t at = 0;
  while (at <= list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string opt = list.substr(at, end - at);
    at = end + 1;
    if (opt.empty()) continue;
    auto is = [&](const char* name) { return opt == name; };
    if (is("ro")) {
      o.read_only = true;
    } else if (is("rw")) {
      o.read_only = false;
    } else if (is("allow_other")) {
      o.allow_other = true;
    } else if (is("default_permissions")) {
      // always on: the kernel checks permissions, and the source checks them again
    } else if (opt.rfind("cert=", 0) == 0) {
      if (opt.size() == 5) throw mount_error("-o cert=: no file named", 2);
      o.certs.emplace_back(opt.substr(5));
    } else if (is("require_signatures")) {
      o.require_signatures = true;
    } else if (is("unbound")) {
      o.unbound = true;
    } else if (opt.rfind("read_ahead_kb=", 0) == 0) {
      const std::string v = opt.substr(14);
      unsigned long kb = 0;
      const auto [end_at, ec] = std::from_chars(v.data(), v.data() + v.size(), kb);
      if (v.empty() || ec != std::errc() || end_at != v.data() + v.size() ||
          kb > max_read_ahead_kb) {
        throw mount_error(
            fmt::format("-o {}: not a whole number of KiB in 0..{}", opt, max_read_ahead_kb), 2);
      }
      o.read_ahead_kb = static_cast<unsigned>(kb);
    } else if (opt.rfind("tree_memory_mb=", 0) == 0) {
      const std::string v = opt.substr(15);
      unsigned long mb = 0;
      const auto [end_at, ec] = std::from_chars(v.data(), v.data() + v.size(), mb);
      if (v.empty() || ec != std::errc() || end_at != v.data() + v.size() || mb < 1 ||
          mb > max_tree_memory_mb) {
        throw mount_error(
            fmt::format("-o {}: not a whole number of MiB in 1..{}", opt, max_tree_memory_mb), 2);
      }
      o.tree_memory_mb = static_cast<unsigned>(mb);
    } else if (opt.rfind("stats=", 0) == 0) {
      if (opt.size() == 6) throw mount_error("-o stats=: no file named", 2);
      o.stats_file = fs::absolute(opt.substr(6));  // the daemon serves from /
    } else if (is("auto_unmount")) {
      o.auto_unmount = true;
    } else if (is("noauto_unmount")) {
      o.auto_unmount = false;
    } else if (is("debug")) {
      o.debug = true;
    } else if (std::find_if(std::begin(flag_options), std::end(flag_options), is) !=
               std::end(flag_options)) {
      o.mount_flags.push_back(opt);
    } else if (std::find_if(std::begin(ignored_options), std::end(ignored_options), is) !=
                   std::end(ignored_options) ||
               opt.rfind("x-", 0) == 0 || opt.rfind("comment=", 0) == 0) {
      // for mount(8) and fstab, not the filesystem
    } else {
      throw mount_error(fmt::format("-o {}: not an option of quiesce verity mount", opt), 2);
    }
  }
}

std::optional<std::string> verity_mount_refusal(const fs::path& source,
                                                const fs::path& mountpoint) {
  // A user who cannot open /dev/fuse mounts through the setuid fusermount3, as libfuse does.
  if (::access("/dev/fuse", R_OK | W_OK) != 0 &&
      (::geteuid() == 0 || setuid_fusermount().empty())) {
    return fmt::format("/dev/fuse: {} (FUSE is not available here{})", std::strerror(errno),
                       ::geteuid() == 0 ? "" : ", and no setuid fusermount3");
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
  // Destroyed in reverse: the filesystem (queues, handles) before the session.
  std::unique_ptr<fuse_session, session_deleter> se;
  filesystem f;
  verity_mount_options options;
  fs::path mountpoint;
  fs::path resolved;  // the mountpoint, symlinks resolved before it was mounted
  bool signals = false;
  std::atomic<bool> unmounted{false};
  std::atomic<bool> detached{false};  // unmount() took the mount away itself
  // auto_unmount: the mountpoint's directory (held from before the mount) and name; the
  // watcher's socket (serve()'s thread, then the destructor).
  fd_t mountpoint_dir;
  std::string mountpoint_name;
  fd_t watcher_done;

  // Every read answered, every handle freed, the queues stopped: nothing replies any more.
  // The seed's queues: the patch's (per-CPU, highpri, max_active = CPUs) or the one before;
  // enables build their trees on a queue of their own, never ahead of reads.
  void start_queues() {
    const int cpus = static_cast<int>(system_topology().cpus().size());
    f.verify_wq = options.unbound
                      ? std::make_unique<workqueue>(
                            "fsverity_read_queue_unbound",
                            wq_options{.unbound = true, .highpri = true, .max_active = cpus})
                      : std::make_unique<workqueue>(
                            "fsverity_read_queue", wq_options{.highpri = true, .max_active = cpus});
    f.enable_wq = std::make_unique<workqueue>("fsverity_enable", wq_options{.unbound = true});
    start_stats();
  }
  // --stats FILE: written every second by an item on system_long_wq that re-arms itself,
  // and once more when the queues are idle at the end.
  std::unique_ptr<delayed_work> stats_tick;
  bool stats_failed = false;  // written only by the tick, then by teardown after it stopped
  void write_stats() {
    try {
      f.stats.write(options.stats_file, *f.verify_wq);
      stats_failed = false;
    } catch (const std::exception& e) {
      if (!stats_failed) log(log_level::warning, fmt::format("quiesce verity mount: {}", e.what()));
      stats_failed = true;  // said once per failing spell, not every second
    }
  }
  void start_stats() {
    if (options.stats_file.empty()) return;
    stats_tick = std::make_unique<delayed_work>("verity_mount_stats", [this](delayed_work& self) {
      write_stats();
      system_long_wq().mod_delayed(self, std::chrono::seconds(1));
    });
    system_long_wq().queue_delayed(*stats_tick, std::chrono::nanoseconds::zero());
  }
  void quiesce_filesystem() {
    if (f.verify_wq) f.verify_wq->flush();
    if (stats_tick) {
      stats_tick->cancel_sync();
      write_stats();  // the final counts: every read has been answered
      stats_tick.reset();
    }
    f.drop_handles();
    f.drop_files();
    // Drained, not destroyed: the queues live as long as the mount object, whose owner may
    // still read verify_queue()'s statistics from another thread after serve() returned
    // (TSan caught the bench doing so while the serving thread reset the pointer).
    if (f.enable_wq) f.enable_wq->drain();
    if (f.verify_wq) f.verify_wq->drain();
  }

  // Takes away this mount if it is dead (ENOTCONN to a forced statx): by the name inside the
  // mountpoint's directory held from before the mount, never a path walked again (as the
  // watcher does); a user's through fusermount3, which unmounts only that user's FUSE mounts.
  void unmount_dead() {
    if (::geteuid() != 0) {
      if (!fusermount_unmount(mountpoint)) {
        log(log_level::warning,
            fmt::format("quiesce verity mount: cannot unmount {}", mountpoint.string()));
      }
      return;
    }
    if (!mountpoint_dir) return;
    struct statx stx {};
    if (::statx(mountpoint_dir.get(), mountpoint_name.c_str(),
                AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE, &stx) == 0 ||
        errno != ENOTCONN) {
      return;  // not (or no longer) a dead mount
    }
    const std::string name = proc_path(mountpoint_dir.get()) + "/" + mountpoint_name;
    if (::umount2(name.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      log(log_level::warning, fmt::format("quiesce verity mount: cannot unmount {}: {}",
                                          mountpoint.string(), std::strerror(errno)));
    }
  }
};

verity_mount::verity_mount(const fs::path& source, const fs::path& mountpoint,
                           const verity_mount_options& o)
    : impl_(std::make_unique<impl>()) {
  const bool root = ::geteuid() == 0;
  const bool allow_other = o.allow_other.value_or(root);
  if (allow_other && !root && !user_allow_other()) {
    throw mount_error(
        "allow_other: only root may let other users in, unless /etc/fuse.conf has "
        "user_allow_other",
        2);
  }
  if (o.require_signatures && o.certs.empty()) {
    throw mount_error("require_signatures: no trusted certificate (--cert FILE, -o cert=FILE)", 2);
  }
  if (auto why = verity_mount_refusal(source, mountpoint)) throw mount_error(*why, 2);
  if (!o.stats_file.empty() && !fs::is_directory(fs::absolute(o.stats_file).parent_path())) {
    throw mount_error(fmt::format("stats: {}: no such directory",
                                  fs::absolute(o.stats_file).parent_path().string()),
                      2);
  }
  raise_descriptor_limit();
  if (root) drop_sys_resource();
  impl_->options = o;
  if (!o.stats_file.empty()) impl_->options.stats_file = fs::absolute(o.stats_file);
  filesystem& f = impl_->f;
  f.source = fs::canonical(source);
  f.require_signatures = o.require_signatures;
  f.read_only = o.read_only;
  f.switch_creds = root;
  if (o.tree_memory_mb < 1 || o.tree_memory_mb > max_tree_memory_mb) {
    throw mount_error(
        fmt::format("tree_memory_mb: {} is not in 1..{}", o.tree_memory_mb, max_tree_memory_mb), 2);
  }
  f.trees = std::make_shared<tree_budget>(std::uint64_t{o.tree_memory_mb} << 20);
  try {
    f.trust = policy_of(o);
    f.init_root();
  } catch (const std::exception& e) {
    throw mount_error(e.what(), 2);
  }
  std::string opts = "fsname=" + escaped(f.source.string()) + ",subtype=quiesce-verity";
  opts += ",default_permissions";
  if (allow_other) opts += ",allow_other";
  if (o.read_only) opts += ",ro";
  // (auto_unmount is quiesce's own watcher, started by serve(): not libfuse's.)
  for (const std::string& flag : o.mount_flags)
    opts += "," + flag;
  std::vector<std::string> args{"quiesce-verity", "-o", opts};
  if (o.debug) args.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  fuse_args fa = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  impl_->se.reset(fuse_session_new(&fa, &verity_fs_ops, sizeof verity_fs_ops, &f));
  fuse_opt_free_args(&fa);
  if (!impl_->se) throw mount_error("libfuse: cannot create a session (see the line above)", 2);
  f.se = impl_->se.get();
  if (o.handle_signals) {
    if (fuse_set_signal_handlers(impl_->se.get()) != 0) {
      throw mount_error("libfuse: cannot install the signal handlers", 1);
    }
    impl_->signals = true;
  }
  impl_->mountpoint = fs::absolute(mountpoint);
  // As /proc/self/mountinfo will name it (resolved now: once mounted, resolving the path
  // would ask this daemon, which does not serve yet).
  const fs::path resolved = impl_->resolved = fs::canonical(mountpoint);
  impl_->mountpoint_dir =
      fd_t(::open(resolved.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  impl_->mountpoint_name = resolved.has_filename() ? resolved.filename().string() : ".";
  if (fuse_session_mount(impl_->se.get(), impl_->mountpoint.c_str()) != 0) {
    if (impl_->signals) fuse_remove_signal_handlers(impl_->se.get());
    throw mount_error(fmt::format("{}: cannot mount (see the line above)", mountpoint.string()), 2);
  }
  // Its readahead window, once the kernel has the connection (filesystem::set_read_ahead):
  // the bdi's sysfs file is root's.
  if (root && o.read_ahead_kb != 0) {
    if (const auto dev = mounted_device(resolved)) {
      f.read_ahead_file = "/sys/class/bdi/" + *dev + "/read_ahead_kb";
      f.read_ahead_kb = o.read_ahead_kb;
    }
  }
  // A daemon that will fork starts its threads in serve(), after the fork.
  if (o.foreground) impl_->start_queues();
}

verity_mount::~verity_mount() {
  impl_->quiesce_filesystem();
  if (!impl_->unmounted.exchange(true)) fuse_session_unmount(impl_->se.get());
  end_auto_unmount(impl_->watcher_done);  // (serve() left early)
  if (impl_->signals) fuse_remove_signal_handlers(impl_->se.get());
}

void verity_mount::serve(const std::function<void(char)>& progress) {
  if (mutant::ready_before_watcher && progress) progress('R');
  // In the process that serves (after a daemonize), before its libfuse threads exist.
  if (impl_->options.auto_unmount) {
    const std::string helper = ::geteuid() == 0 ? std::string() : setuid_fusermount();
    const int err = impl_->mountpoint_dir
                        ? start_auto_unmount(impl_->mountpoint_dir.get(), impl_->mountpoint_name,
                                             impl_->resolved.string(), helper, impl_->watcher_done)
                        : EBADF;
    if (err == 0 && progress) progress('W');
    if (err != 0) {
      log(log_level::warning,
          fmt::format("quiesce verity mount: no auto_unmount ({}): a daemon killed outright "
                      "would leave {} mounted",
                      std::strerror(err), impl_->mountpoint.string()));
    }
  }
  // Capabilities are per thread: the one that serves (and starts libfuse's threads) may not
  // be the one that constructed the mount.
  if (impl_->f.switch_creds) drop_sys_resource();
  if (!impl_->f.verify_wq) impl_->start_queues();
  if (!mutant::ready_before_watcher && progress) progress('R');
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, 16);
  const int rc = fuse_session_loop_mt(impl_->se.get(), cfg);
  fuse_loop_cfg_destroy(cfg);
  // libfuse's threads have ended; reads still on the verification queue reply now, while
  // the session is alive.
  impl_->quiesce_filesystem();
  if (impl_->detached.load()) {
    // unmount() detached the mount and ended the loop, maybe before the kernel ended the
    // connection. libfuse's unmount below unmounts again unless the device reports the
    // connection gone - and on the bare directory it would print "fuse: failed to
    // unmount". The kernel ends it once no file is open and the detached mount's last
    // reference is dropped - at once on an idle machine, but that last step may run in a
    // kworker, which a loaded machine (two CPUs busy) delayed past a second: wait up to
    // 10 s, returning as soon as the device reports it (POLLERR).
    constexpr int wait_ms = 10'000, step_ms = 10;
    pollfd pfd{fuse_session_fd(impl_->se.get()), 0, 0};
    for (int waited = 0; waited < wait_ms; waited += step_ms) {
      if (::poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR)) break;
      ::usleep(step_ms * 1000);
    }
  }
  if (!impl_->unmounted.exchange(true)) fuse_session_unmount(impl_->se.get());
  end_auto_unmount(impl_->watcher_done);
  if (rc < 0) {
    throw mount_error(fmt::format("libfuse: the session ended with {}", std::strerror(-rc)), 1);
  }
}

void verity_mount::unmount() {
  fuse_session_exit(impl_->se.get());
  // Detached: the kernel ends the connection once the last open file closes, and the
  // session's threads see it (ENODEV) and return.
  // Said before the detach, not after: the loop may end (ENODEV) and serve() read the
  // flag before umount2 has even returned here - it then skipped the wait and libfuse
  // unmounted the bare directory ("fuse: failed to unmount ...: Invalid argument").
  impl_->detached = true;
  if (::umount2(impl_->mountpoint.c_str(), MNT_DETACH) != 0 &&
      !fusermount_unmount(impl_->mountpoint)) {
    impl_->detached = false;
    log(log_level::warning,
        fmt::format("quiesce verity mount: cannot unmount {}", impl_->mountpoint.string()));
  }
}

workqueue& verity_mount::verify_queue() {
  return *impl_->f.verify_wq;
}

void serve_verity_mount(const fs::path& source, const fs::path& mountpoint,
                        const verity_mount_options& o, const std::function<void()>& mounted) {
  // The caller's mode reaches the source as given: the kernel applied the caller's umask.
  ::umask(0);
  verity_mount m(source, mountpoint, o);
  if (mounted) mounted();
  if (o.foreground) {
    m.serve();
    return;
  }
  // In the background from here, as sshfs, but the caller's process waits for the child to
  // say it serves (libfuse 3.14's fuse_daemonize says so before the child has set anything
  // up, so a daemon killed just after the command returned left a dead mount behind). No
  // thread exists yet (serve() starts them), so the child has everything.
  int ready_pipe[2];
  if (::pipe2(ready_pipe, O_CLOEXEC) != 0) throw mount_error("cannot daemonize: pipe", 1);
  fd_t told(ready_pipe[0]), tell(ready_pipe[1]);
  // Opened before the fork: the parent must be able to let go of its /dev/fuse.
  fd_t null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null) throw mount_error(fmt::format("cannot open /dev/null: {}", std::strerror(errno)), 1);
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t child = ::fork();
  if (child < 0) throw mount_error(fmt::format("cannot daemonize: {}", std::strerror(errno)), 1);
  if (child > 0) {
    tell.reset();
    // SIGINT, SIGTERM and SIGHUP end the waiting command again (libfuse's handlers would
    // only mark a session this process does not serve).
    if (m.impl_->signals) {
      fuse_remove_signal_handlers(m.impl_->se.get());
      m.impl_->signals = false;
    }
    // This process keeps no hold on the connection: the child's watcher must find it over
    // once the child is gone (the descriptor number stays, on /dev/null, for the session).
    // (dup3 of two open descriptors cannot fail; if it did, this process would keep the
    // connection alive past the child, so the child is ended and its mount taken away below.)
    if (::dup3(null.get(), fuse_session_fd(m.impl_->se.get()), O_CLOEXEC) < 0) {
      ::kill(child, SIGKILL);
    }
    bool watched = false;  // the child's auto_unmount watcher exists
    for (;;) {
      char byte = 0;
      const ssize_t n = ::read(told.get(), &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1 && byte == 'R') ::_exit(0);
      if (n == 1) {
        watched = watched || byte == 'W';
        continue;
      }
      break;  // the end of the pipe: the child has ended (its write end lives until then)
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    // An error ending the child was said on our stderr, and its own teardown unmounted. A
    // killed child's mount is dead: its watcher takes it away if it had one, else we do.
    const bool killed = WIFSIGNALED(status);
    if (killed && !watched) m.impl_->unmount_dead();
    m.impl_->unmounted = true;  // not again by the destructor
    throw mount_error(!killed   ? "the daemon ended before it served"
                      : watched ? "the daemon was killed before it served (its watcher unmounts)"
                                : "the daemon was killed before it served: unmounted",
                      1);
  }
  told.reset();
  // Held until this process ends, not closed by the unwinding of a failure below: the
  // caller's process must see the end of the pipe after this one's teardown unmounted.
  const int tell_fd = tell.release();
  if (::setsid() < 0 || ::chdir("/") != 0) {
    throw mount_error(fmt::format("cannot daemonize: {}", std::strerror(errno)), 1);
  }
  m.serve([tell_fd, &null](char stage) {
    if (stage == 'R') {
      for (int std_fd = 0; std_fd <= 2; ++std_fd)
        (void)::dup2(null.get(), std_fd);  // dup2 clears close-on-exec on 0-2
    }
    while (::write(tell_fd, &stage, 1) < 0 && errno == EINTR) {
    }
    if (stage == 'R') {
      null.reset();
      ::close(tell_fd);
    }
  });
}

}  // namespace quiesce::mount
