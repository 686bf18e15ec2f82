// SPDX-License-Identifier: Apache-2.0
// `quiesce verity mount` is a whole filesystem: the same operations run on a plain
// directory and through a mount of an identical one, results and errno compared one by one
// (the source filesystem is the oracle, as pjdfstest's expectations are), then both trees
// compared; and a random-operations data checker in the spirit of xfstests' fsx (writes,
// truncates, reads, mmap reads and writes, hole punches, copy_file_range), every byte checked
// against a shadow copy.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../../src/mount/sticky.hpp"
#include "mount_fixture.hpp"

namespace {

namespace fs = std::filesystem;
using quiesce::test::as_nobody;
using quiesce::test::nobody_uid;
using quiesce::test::slurp;

// "0" or the errno's name: what a step saw.
std::string outcome(int rc) {
  if (rc >= 0) return "0";
  const char* name = strerrordesc_np(errno);
  return std::string("errno ") + std::to_string(errno) + " (" + (name ? name : "?") + ")";
}

std::string fmt_mode(mode_t m) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "type %o mode %04o", m & S_IFMT, m & 07777);
  return buf;
}

std::string stat_line(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return outcome(-1);
  std::string line = fmt_mode(st.st_mode);
  line += " uid " + std::to_string(st.st_uid) + " gid " + std::to_string(st.st_gid);
  if (S_ISREG(st.st_mode)) line += " size " + std::to_string(st.st_size);
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) line += " nlink " + std::to_string(st.st_nlink);
  return line;
}

// Everything below `root`: name, attributes, contents (regular files), targets (symlinks).
std::map<std::string, std::string> tree_of(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path p = it->path();
    std::string line = stat_line(p);
    if (it->is_symlink()) {
      line += " -> " + fs::read_symlink(p).string();
    } else if (it->is_regular_file()) {
      line += " [" + slurp(p) + "]";
    }
    out[fs::relative(p, root).string()] = line;
  }
  return out;
}

std::string xattr_get(const fs::path& p, const char* name) {
  char buf[256];
  const ssize_t n = ::getxattr(p.c_str(), name, buf, sizeof buf);
  return n < 0 ? outcome(-1) : std::string(buf, static_cast<std::size_t>(n));
}

int write_all(const fs::path& p, int flags, const std::string& data) {
  const int fd = ::open(p.c_str(), flags, 0644);
  if (fd < 0) return -1;
  const ssize_t n = ::write(fd, data.data(), data.size());
  ::close(fd);
  return n == static_cast<ssize_t>(data.size()) ? 0 : -1;
}

// fn() (0, or -1 with errno set) run in a forked child as nobody (uid and gid 65534) with
// the one supplementary group `group`: "0", the errno it failed with, or "255" if that
// identity could not be taken.
template <class F>
std::string nobody_in_group(gid_t group, F fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const gid_t groups[] = {group};
    if (::setgroups(1, groups) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      std::_Exit(255);
    }
    std::_Exit(fn() == 0 ? 0 : errno);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return std::to_string(WEXITSTATUS(status));
}

// fs.protected_regular set to a value for a scope (a step), the old one back after.
class protected_regular {
 public:
  explicit protected_regular(const char* value) {
    std::ifstream(path_) >> old_;
    std::ofstream(path_) << value;
  }
  ~protected_regular() { std::ofstream(path_) << old_; }
  protected_regular(const protected_regular&) = delete;
  protected_regular& operator=(const protected_regular&) = delete;

 private:
  static constexpr const char* path_ = "/proc/sys/fs/protected_regular";
  std::string old_ = "0";
};

// One step: a name and what it does under a root; returns what it saw.
struct step {
  std::string name;
  std::function<std::string(const fs::path&)> run;
};

std::vector<step> steps() {
  using P = const fs::path&;
  auto rc = [](int r) { return outcome(r); };
  auto nobody = [](std::function<int()> fn) {
    const int err = as_nobody([&] { return fn() < 0 ? errno : 0; });
    return err == 0 ? std::string("0") : "errno " + std::to_string(err);
  };
  const std::string long_name(255, 'n'), too_long(256, 'n');
  return {
      {"open missing", [=](P r) { return rc(::open((r / "missing").c_str(), O_RDONLY)); }},
      {"O_CREAT|O_EXCL existing",
       [=](P r) { return rc(::open((r / "f").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644)); }},
      {"open dir for writing", [=](P r) { return rc(::open((r / "d").c_str(), O_WRONLY)); }},
      {"O_DIRECTORY on a file",
       [=](P r) { return rc(::open((r / "f").c_str(), O_RDONLY | O_DIRECTORY)); }},
      {"file as a directory", [=](P r) { return rc(::open((r / "f/x").c_str(), O_RDONLY)); }},
      {"creat 0640",
       [=](P r) {
         const int fd = ::creat((r / "new").c_str(), 0640);
         if (fd < 0) return outcome(-1);
         ::close(fd);
         return stat_line(r / "new");
       }},
      {"creat 0444 opened O_RDWR",
       [=](P r) {
         const int fd = ::open((r / "rdonly-new").c_str(), O_CREAT | O_RDWR, 0444);
         if (fd < 0) return outcome(-1);
         const ssize_t n = ::write(fd, "w", 1);
         ::close(fd);
         return std::to_string(n) + " " + stat_line(r / "rdonly-new");
       }},
      {"O_APPEND writes",
       [=](P r) {
         write_all(r / "new", O_WRONLY | O_APPEND, "abc");
         write_all(r / "new", O_WRONLY | O_APPEND, "abc");
         return slurp(r / "new");
       }},
      {"O_TRUNC",
       [=](P r) {
         std::string first = rc(write_all(r / "new", O_WRONLY | O_TRUNC, "xyz"));
         return first + slurp(r / "new");
       }},
      {"mkdir",
       [=](P r) {
         std::string first = rc(::mkdir((r / "d2").c_str(), 0750));
         return first + stat_line(r / "d2");
       }},
      {"mkdir existing", [=](P r) { return rc(::mkdir((r / "d2").c_str(), 0750)); }},
      {"mkdir in missing", [=](P r) { return rc(::mkdir((r / "missing/x").c_str(), 0750)); }},
      {"rename over a file",
       [=](P r) {
         std::string first = rc(::rename((r / "new").c_str(), (r / "f").c_str()));
         return first + slurp(r / "f");
       }},
      {"rename file over dir",
       [=](P r) { return rc(::rename((r / "f").c_str(), (r / "d").c_str())); }},
      {"rename dir over file",
       [=](P r) { return rc(::rename((r / "d").c_str(), (r / "f").c_str())); }},
      {"rename dir over empty dir",
       [=](P r) { return rc(::rename((r / "d").c_str(), (r / "e").c_str())); }},
      {"rename dir into itself",
       [=](P r) { return rc(::rename((r / "e").c_str(), (r / "e/sub").c_str())); }},
      {"rename over non-empty dir",
       [=](P r) { return rc(::rename((r / "d2").c_str(), (r / "e").c_str())); }},
      {"RENAME_NOREPLACE existing",
       [=](P r) {
         return rc(::renameat2(AT_FDCWD, (r / "f").c_str(), AT_FDCWD, (r / "ro").c_str(),
                               RENAME_NOREPLACE));
       }},
      {"RENAME_NOREPLACE free",
       [=](P r) {
         return rc(::renameat2(AT_FDCWD, (r / "rdonly-new").c_str(), AT_FDCWD,
                               (r / "moved").c_str(), RENAME_NOREPLACE));
       }},
      {"RENAME_EXCHANGE",
       [=](P r) {
         std::string first = rc(::renameat2(AT_FDCWD, (r / "f").c_str(), AT_FDCWD,
                                            (r / "ro").c_str(), RENAME_EXCHANGE));
         return first + slurp(r / "f") + "|" + slurp(r / "ro");
       }},
      {"RENAME_EXCHANGE missing",
       [=](P r) {
         return rc(::renameat2(AT_FDCWD, (r / "f").c_str(), AT_FDCWD, (r / "missing").c_str(),
                               RENAME_EXCHANGE));
       }},
      {"link",
       [=](P r) {
         std::string first = rc(::link((r / "f").c_str(), (r / "f2").c_str()));
         return first + stat_line(r / "f");
       }},
      {"link a dir", [=](P r) { return rc(::link((r / "e").c_str(), (r / "e2").c_str())); }},
      {"link over existing",
       [=](P r) { return rc(::link((r / "f").c_str(), (r / "ro").c_str())); }},
      {"symlink",
       [=](P r) {
         std::string first = rc(::symlink("nowhere/at/all", (r / "s").c_str()));
         return first + [&] {
           std::error_code ec;
           return fs::read_symlink(r / "s", ec).string();
         }() + stat_line(r / "s");
       }},
      {"symlink existing", [=](P r) { return rc(::symlink("x", (r / "s").c_str())); }},
      {"readlink a file",
       [=](P r) {
         char buf[64];
         return rc(static_cast<int>(::readlink((r / "f").c_str(), buf, sizeof buf)));
       }},
      {"chmod",
       [=](P r) {
         std::string first = rc(::chmod((r / "f").c_str(), 0604));
         return first + stat_line(r / "f");
       }},
      {"chown",
       [=](P r) {
         std::string first = rc(::chown((r / "f2").c_str(), 65534, 65534));
         return first + stat_line(r / "f2");
       }},
      {"lchown a symlink",
       [=](P r) {
         std::string first = rc(::lchown((r / "s").c_str(), 65534, 65534));
         return first + stat_line(r / "s");
       }},
      {"utimensat",
       [=](P r) {
         const timespec ts[2] = {{1000, 0}, {2000, 5}};
         struct stat st {};
         const int x = ::utimensat(AT_FDCWD, (r / "f").c_str(), ts, 0);
         ::stat((r / "f").c_str(), &st);
         std::string first = rc(x);
         return first + " mtime " + std::to_string(st.st_mtim.tv_sec) + "." +
                std::to_string(st.st_mtim.tv_nsec);
       }},
      {"truncate up",
       [=](P r) {
         std::string first = rc(::truncate((r / "f").c_str(), 100));
         return first + stat_line(r / "f");
       }},
      {"truncate down",
       [=](P r) {
         std::string first = rc(::truncate((r / "f").c_str(), 2));
         return first + slurp(r / "f");
       }},
      {"truncate a dir", [=](P r) { return rc(::truncate((r / "e").c_str(), 0)); }},
      {"unlink a dir", [=](P r) { return rc(::unlink((r / "e").c_str())); }},
      {"rmdir non-empty", [=](P r) { return rc(::rmdir((r / "e").c_str())); }},
      {"rmdir a file", [=](P r) { return rc(::rmdir((r / "f").c_str())); }},
      {"unlink", [=](P r) { return rc(::unlink((r / "e/g").c_str())); }},
      {"rmdir", [=](P r) { return rc(::rmdir((r / "e").c_str())); }},
      {"mkfifo",
       [=](P r) {
         std::string first = rc(::mkfifo((r / "fifo").c_str(), 0640));
         return first + stat_line(r / "fifo");
       }},
      {"mknod char",
       [=](P r) {
         std::string first = rc(::mknod((r / "null").c_str(), S_IFCHR | 0600, makedev(1, 3)));
         return first + stat_line(r / "null");
       }},
      {"setxattr", [=](P r) { return rc(::setxattr((r / "f").c_str(), "user.k", "v", 1, 0)); }},
      {"getxattr", [=](P r) { return xattr_get(r / "f", "user.k"); }},
      {"XATTR_CREATE existing",
       [=](P r) { return rc(::setxattr((r / "f").c_str(), "user.k", "w", 1, XATTR_CREATE)); }},
      {"XATTR_REPLACE missing",
       [=](P r) { return rc(::setxattr((r / "f").c_str(), "user.z", "w", 1, XATTR_REPLACE)); }},
      {"listxattr",
       [=](P r) {
         char buf[256];
         const ssize_t n = ::listxattr((r / "f").c_str(), buf, sizeof buf);
         return n < 0 ? outcome(-1) : std::string(buf, static_cast<std::size_t>(n));
       }},
      {"removexattr",
       [=](P r) {
         std::string first = rc(::removexattr((r / "f").c_str(), "user.k"));
         return first + xattr_get(r / "f", "user.k");
       }},
      {"name of 255", [=](P r) { return rc(write_all(r / long_name, O_CREAT | O_WRONLY, "x")); }},
      {"name of 256", [=](P r) { return rc(write_all(r / too_long, O_CREAT | O_WRONLY, "x")); }},
      {"a file named .verity is a file",
       [=](P r) {
         const std::string first = slurp(r / "x.verity");
         return first + rc(::rename((r / "x.verity").c_str(), (r / "y.verity").c_str()));
       }},
      // Permission denials, as nobody.
      {"nobody creates in root's dir",
       [=](P r) { return nobody([&] { return ::creat((r / "theirs").c_str(), 0644); }); }},
      {"nobody unlinks in root's dir",
       [=](P r) { return nobody([&] { return ::unlink((r / "f2").c_str()); }); }},
      {"nobody chmods root's file",
       [=](P r) { return nobody([&] { return ::chmod((r / "ro").c_str(), 0777); }); }},
      {"nobody reads a 0600 file",
       [=](P r) { return nobody([&] { return ::open((r / "secret").c_str(), O_RDONLY); }); }},
      {"nobody writes a 0444 file",
       [=](P r) { return nobody([&] { return ::open((r / "ro").c_str(), O_WRONLY); }); }},
      {"nobody renames in a sticky dir",
       [=](P r) {
         return nobody(
             [&] { return ::rename((r / "pub/rootfile").c_str(), (r / "pub/mine").c_str()); });
       }},
      {"nobody unlinks in a sticky dir",
       [=](P r) { return nobody([&] { return ::unlink((r / "pub/rootfile").c_str()); }); }},
      {"nobody creates in a sticky dir",
       [=](P r) {
         std::string first =
             nobody([&] { return write_all(r / "pub/nobodys", O_CREAT | O_WRONLY, "n"); });
         return first + stat_line(r / "pub/nobodys");
       }},
      {"nobody writes own file",
       [=](P r) {
         return nobody([&] { return write_all(r / "nob/n", O_WRONLY | O_APPEND, "+"); });
       }},
      {"nobody chowns own file to root",
       [=](P r) { return nobody([&] { return ::chown((r / "nob/n").c_str(), 0, 0); }); }},
      {"nobody touches root's file",
       [=](P r) {
         return nobody([&] { return ::utimensat(AT_FDCWD, (r / "ro").c_str(), nullptr, 0); });
       }},
      {"nobody sets trusted.*",
       [=](P r) {
         return nobody([&] { return ::setxattr((r / "nob/n").c_str(), "trusted.x", "v", 1, 0); });
       }},
      {"nobody links root's file",
       [=](P r) {
         return nobody([&] { return ::link((r / "secret").c_str(), (r / "nob/s").c_str()); });
       }},
      {"nobody in group 100 creates in a root:100 0770 dir",
       [=](P r) {
         const std::string first =
             nobody_in_group(100, [&] { return write_all(r / "grp/x", O_CREAT | O_WRONLY, "g"); });
         return first + " " + stat_line(r / "grp/x");
       }},
      {"nobody appends to root's set-user-ID file",
       [=](P r) {
         std::string first =
             nobody([&] { return write_all(r / "pub/suid", O_WRONLY | O_APPEND, "+"); });
         return first + " " + stat_line(r / "pub/suid");
       }},
      {"nobody appends to root's set-group-ID file without group execute",
       [=](P r) {
         // Linux 6.2+ (setattr_should_drop_sgid): a writer outside the file's group, without
         // CAP_FSETID, loses the bit even when the group may not execute the file.
         std::string first =
             nobody([&] { return write_all(r / "pub/sgid_nx", O_WRONLY | O_APPEND, "+"); });
         return first + " " + stat_line(r / "pub/sgid_nx");
       }},
      {"nobody truncates root's set-group-ID file without group execute",
       [=](P r) {
         std::string first = nobody([&] { return ::truncate((r / "pub/sgid_nx2").c_str(), 2); });
         return first + " " + stat_line(r / "pub/sgid_nx2");
       }},
      {"nobody allocates in root's set-group-ID file without group execute",
       [=](P r) {
         std::string first = nobody([&] {
           const int fd = ::open((r / "pub/sgid_nx3").c_str(), O_WRONLY);
           if (fd < 0) return -1;
           const int rc = ::fallocate(fd, 0, 0, 8);
           const int err = errno;
           ::close(fd);
           errno = err;
           return rc;
         });
         return first + " " + stat_line(r / "pub/sgid_nx3");
       }},
      {"nobody copies into root's set-group-ID file without group execute",
       [=](P r) {
         std::string first = nobody([&] {
           const int in = ::open((r / "f").c_str(), O_RDONLY);
           const int out = ::open((r / "pub/sgid_nx4").c_str(), O_WRONLY);
           const ssize_t n =
               in < 0 || out < 0 ? -1 : ::copy_file_range(in, nullptr, out, nullptr, 3, 0);
           const int err = errno;
           ::close(in);
           ::close(out);
           errno = err;
           return n < 0 ? -1 : 0;
         });
         return first + " " + stat_line(r / "pub/sgid_nx4");
       }},
      {"nobody in group 0 appends to root's set-group-ID file without group execute",
       [=](P r) {
         // A member of the file's group keeps the bit (supplementary group 0, fsgid not 0).
         const std::string first = nobody_in_group(
             0, [&] { return write_all(r / "pub/sgid_nx5", O_WRONLY | O_APPEND, "+"); });
         return first + " " + stat_line(r / "pub/sgid_nx5");
       }},
      {"nobody truncates root's set-group-ID file",
       [=](P r) {
         std::string first = nobody([&] { return ::truncate((r / "pub/sgid").c_str(), 1); });
         return first + " " + stat_line(r / "pub/sgid");
       }},
      {"nobody appends to root's file with a file capability",
       [=](P r) {
         std::string first =
             nobody([&] { return write_all(r / "pub/fcap", O_WRONLY | O_APPEND, "+"); });
         char v[64];
         const ssize_t n = ::getxattr((r / "pub/fcap").c_str(), "security.capability", v, sizeof v);
         return first + " capability " + outcome(n < 0 ? -1 : 0);
       }},
      {"nobody removes the file capability of root's file",
       [=](P r) {
         return nobody(
             [&] { return ::removexattr((r / "pub/fcap2").c_str(), "security.capability"); });
       }},
      {"nobody clears the set-user-ID bit of root's file",
       [=](P r) { return nobody([&] { return ::chmod((r / "pub/suid2").c_str(), 0777); }); }},
      {"nobody opens root's file in a sticky directory with O_CREAT, protected_regular 1",
       [=](P r) {
         // The name was never looked up through the mount: the kernel sends a CREATE.
         const protected_regular one("1");
         return nobody([&] { return write_all(r / "pub/trap", O_CREAT | O_WRONLY, "t"); });
       }},
      {"nobody makes a device",
       [=](P r) {
         return nobody(
             [&] { return ::mknod((r / "nob/dev").c_str(), S_IFCHR | 0666, makedev(1, 3)); });
       }},
  };
}

// The initial tree, the same in both roots.
void populate(const fs::path& r) {
  std::ofstream(r / "f") << "hello";
  std::ofstream(r / "ro") << "ro";
  ::chmod((r / "ro").c_str(), 0444);
  std::ofstream(r / "secret") << "secret";
  ::chmod((r / "secret").c_str(), 0600);
  fs::create_directories(r / "d");
  std::ofstream(r / "d/g") << "g";
  fs::create_directories(r / "e");
  fs::create_directories(r / "pub");
  ::chmod((r / "pub").c_str(), 01777);
  std::ofstream(r / "pub/rootfile") << "rf";
  ::chmod((r / "pub/rootfile").c_str(), 0666);
  for (const auto& [name, mode] :
       {std::pair{"pub/suid", 04777}, std::pair{"pub/suid2", 04777}, std::pair{"pub/sgid", 02777},
        std::pair{"pub/sgid_nx", 02666}, std::pair{"pub/sgid_nx2", 02666},
        std::pair{"pub/sgid_nx3", 02666}, std::pair{"pub/sgid_nx4", 02666},
        std::pair{"pub/sgid_nx5", 02666}}) {
    std::ofstream(r / name) << "set-id";
    ::chmod((r / name).c_str(), static_cast<mode_t>(mode));
  }
  std::ofstream(r / "pub/trap") << "trap";  // a third user's, neither nobody's nor pub's owner's
  ::chmod((r / "pub/trap").c_str(), 0666);
  ::chown((r / "pub/trap").c_str(), 1, 1);
  // A file capability (cap_net_raw permitted: struct vfs_cap_data, revision 2).
  const std::uint32_t cap[5] = {0x02000000, 1u << 13, 0, 0, 0};
  for (const char* name : {"pub/fcap", "pub/fcap2"}) {
    std::ofstream(r / name) << "fcap";
    ::chmod((r / name).c_str(), 0666);
    // (Checked: a file system without it would make the two steps below vacuous.)
    EXPECT_EQ(::setxattr((r / name).c_str(), "security.capability", cap, sizeof cap, 0), 0)
        << name << ": " << std::strerror(errno);
  }
  fs::create_directories(r / "nob");
  std::ofstream(r / "nob/n") << "n";
  ::chown((r / "nob").c_str(), 65534, 65534);
  ::chown((r / "nob/n").c_str(), 65534, 65534);
  std::ofstream(r / "x.verity") << "not a sidecar";
  fs::create_directories(r / "grp");
  ::chown((r / "grp").c_str(), 0, 100);
  ::chmod((r / "grp").c_str(), 0770);
  ::chmod(r.c_str(), 0755);
}

class MountPosix : public quiesce::test::MountFixture {};

TEST_F(MountPosix, EveryOperationAnswersAsTheSourceFilesystem) {
  SKIP_UNLESS_FUSE();
  const fs::path plain = dir_ / "plain";
  fs::create_directories(plain);
  populate(plain);
  populate(src_);
  start();
  for (const step& s : steps()) {
    const std::string want = s.run(plain);
    const std::string got = s.run(mnt_);
    EXPECT_EQ(got, want) << s.name;
    if (std::getenv("QUIESCE_POSIX_TRACE")) std::printf("%-32s %s\n", s.name.c_str(), want.c_str());
  }
  const auto want = tree_of(plain);
  const auto got = tree_of(mnt_);
  for (const auto& [name, line] : want) {
    const auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << name << ": missing through the mount";
      continue;
    }
    EXPECT_EQ(it->second, line) << name;
  }
  for (const auto& [name, line] : got)
    EXPECT_TRUE(want.count(name)) << name << ": only through the mount";
  // What the mount did is what SOURCE holds.
  EXPECT_EQ(tree_of(src_), want);
}

// The mount's own protected_regular check (src/mount/sticky.hpp, for a CREATE that finds the
// name taken - a race the kernel's LOOKUP first leaves open) against the kernel's on the
// local file system, over its whole range: every level (0, 1, 2), sticky or not, world-,
// group- or owner-writable directories, and a file that is the caller's, the directory
// owner's, or a third user's. Nobody opens with O_CREAT; the predicate must say what the
// kernel did (EACCES or not).
TEST(MountSticky, TheCreateCheckAnswersAsTheKernelAtEveryLevel) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (fs.protected_regular, ownerships)";
  const fs::path base =
      fs::temp_directory_path() / ("quiesce-sticky-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  ::chmod(base.c_str(), 0755);
  int cases = 0;
  for (const char* level : {"0", "1", "2"}) {
    const protected_regular set(level);
    for (const mode_t dir_mode : {01777, 01771, 01711, 0777, 0771}) {
      for (const uid_t owner : {nobody_uid, uid_t{0}, uid_t{1}}) {
        const fs::path dir = base / ("d" + std::to_string(cases));
        fs::create_directories(dir);
        ::chmod(dir.c_str(), dir_mode);  // root's
        const fs::path file = dir / "f";
        std::ofstream(file) << "f";
        ::chmod(file.c_str(), 0666);
        ::chown(file.c_str(), owner, owner);
        const int kernel = as_nobody([&] {
          const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY, 0644);
          if (fd < 0) return errno;
          ::close(fd);
          return 0;
        });
        struct stat dir_st {
        }, file_st{};
        ASSERT_EQ(::stat(dir.c_str(), &dir_st), 0);
        ASSERT_EQ(::stat(file.c_str(), &file_st), 0);
        const int mount = quiesce::mount::detail::may_create_in_sticky(
            quiesce::mount::detail::protected_regular_level(), nobody_uid, dir_st, file_st);
        EXPECT_EQ(mount, kernel == EACCES ? EACCES : 0)
            << "protected_regular " << level << ", directory " << std::oct << dir_mode << std::dec
            << ", file of uid " << owner << ": the kernel said " << kernel;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 45);
  fs::remove_all(base);
}

// Random operations on plain files through the mount, each byte checked against a shadow
// copy (xfstests' fsx): writes, truncates, reads, mmap reads and writes, hole punches,
// copy_file_range from another file; two files at once, and SOURCE at the end.
TEST_F(MountPosix, RandomOperationsKeepEveryByte) {
  SKIP_UNLESS_FUSE();
  start();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %u\n", seed);  // also when the run dies of a signal
  std::fflush(stdout);
  std::mt19937 rng(seed);
  constexpr std::size_t max_file_size = 256 * 1024;
  std::vector<std::string> shadow(2);
  std::vector<int> fds(2);
  for (int i = 0; i < 2; ++i) {
    fds[i] = ::open((mnt_ / ("fsx" + std::to_string(i))).c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fds[i], 0);
  }
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n + 1)); };
  for (int op = 0; op < 3000; ++op) {
    const int which = static_cast<int>(rng() % 2);
    const int fd = fds[which];
    std::string& sh = shadow[which];
    switch (rng() % 7) {
      case 0: {  // write
        const std::size_t off = pick(max_file_size - 1), len = 1 + pick(16384);
        std::string data(std::min(len, max_file_size - off), '\0');
        for (char& c : data)
          c = static_cast<char>(rng());
        ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)),
                  static_cast<ssize_t>(data.size()));
        if (sh.size() < off + data.size()) sh.resize(off + data.size(), '\0');
        sh.replace(off, data.size(), data);
        break;
      }
      case 1: {  // truncate
        const std::size_t size = pick(max_file_size);
        ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
        sh.resize(size, '\0');
        break;
      }
      case 2:
      case 3: {  // read
        const std::size_t off = pick(max_file_size), len = pick(65536);
        std::string got(len, '\0');
        const ssize_t n = ::pread(fd, got.data(), len, static_cast<off_t>(off));
        ASSERT_GE(n, 0);
        const std::string want = off < sh.size() ? sh.substr(off, len) : std::string();
        ASSERT_EQ(std::string(got.data(), static_cast<std::size_t>(n)), want)
            << "op " << op << " read " << off << "+" << len;
        break;
      }
      case 4: {  // mmap read and write
        if (sh.empty()) break;
        // A size the mount reports smaller than the shadow's would make the map's last pages
        // fault (SIGBUS): a failure with the operation's number, not a crash.
        struct stat st {};
        ASSERT_EQ(::fstat(fd, &st), 0);
        ASSERT_EQ(static_cast<std::size_t>(st.st_size), sh.size()) << "op " << op << " size";
        void* map = ::mmap(nullptr, sh.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ASSERT_NE(map, MAP_FAILED);
        ASSERT_EQ(std::memcmp(map, sh.data(), sh.size()), 0) << "op " << op << " mmap read";
        const std::size_t off = pick(sh.size() - 1), len = std::min(pick(4096), sh.size() - off);
        for (std::size_t i = 0; i < len; ++i) {
          const char c = static_cast<char>(rng());
          static_cast<char*>(map)[off + i] = c;
          sh[off + i] = c;
        }
        ASSERT_EQ(::msync(map, sh.size(), MS_SYNC), 0);
        ::munmap(map, sh.size());
        break;
      }
      case 5: {  // punch a hole
        if (sh.empty()) break;
        const std::size_t off = pick(sh.size() - 1), len = 1 + pick(sh.size() - off - 1);
        if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                        static_cast<off_t>(len)) == 0) {
          std::fill(sh.begin() + static_cast<std::ptrdiff_t>(off),
                    sh.begin() + static_cast<std::ptrdiff_t>(off + len), '\0');
        } else {
          ASSERT_EQ(errno, EOPNOTSUPP) << "op " << op;
        }
        break;
      }
      case 6: {  // copy_file_range from the other file
        const std::string& other = shadow[1 - which];
        if (other.empty()) break;
        loff_t in = static_cast<loff_t>(pick(other.size() - 1));
        loff_t out = static_cast<loff_t>(pick(max_file_size / 2));
        const std::size_t len = std::min<std::size_t>(pick(8192), other.size() - in);
        const loff_t from = in, to = out;
        const ssize_t n = ::copy_file_range(fds[1 - which], &in, fd, &out, len, 0);
        ASSERT_GE(n, 0) << std::strerror(errno);
        const std::size_t copied = static_cast<std::size_t>(n);
        if (sh.size() < static_cast<std::size_t>(to) + copied) sh.resize(to + copied, '\0');
        sh.replace(static_cast<std::size_t>(to), copied,
                   other.substr(static_cast<std::size_t>(from), copied));
        break;
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(::fsync(fds[i]), 0);
    ::close(fds[i]);
    EXPECT_TRUE(slurp(src_ / ("fsx" + std::to_string(i))) == shadow[i])
        << "SOURCE differs: fsx" << i;
    EXPECT_TRUE(slurp(mnt_ / ("fsx" + std::to_string(i))) == shadow[i])
        << "the mount differs: fsx" << i;
  }
}

}  // namespace
