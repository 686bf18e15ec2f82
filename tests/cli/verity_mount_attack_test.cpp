// SPDX-License-Identifier: Apache-2.0
// The threat model of `quiesce verity mount` (src/mount/include/quiesce/mount/verity_fs.hpp),
// attack by attack: a root daemon with allow_other, and an unprivileged user (nobody) who
// owns a directory inside SOURCE and changes it while it is mounted. Each case is an attack
// that once worked (it fails against the CLI of 4bc30b1: QUIESCE_MOUNT_CLI=... to see it).
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/fsverity.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mount_fixture.hpp"
#include "quiesce/mount/verity_fs.hpp"

namespace {

namespace fs = std::filesystem;
using quiesce::test::as_nobody;
using quiesce::test::errno_of;
using quiesce::test::eventually;
using quiesce::test::shell2;
using quiesce::test::slurp;
using quiesce::test::write_random;

constexpr const char* secret_text = "ROOT-ONLY SECRET\n";
// What a user's file holds: longer than the secret, so that a read through a size the
// kernel cached for it would show all of the secret.
const std::string mine_text(64, 'm');

bool leaked(const std::string& data) {
  return data.find("ROOT-ONLY") != std::string::npos;
}

// Unmounts what the test mounted at `at` (a ramfs SOURCE, a second mount) when it leaves.
struct unmount_at {
  fs::path at;
  ~unmount_at() { shell2("umount " + at.string()); }
};

// What a child read from a file: its bytes, or the errno that stopped it.
struct read_result {
  int err = 0;
  std::string data;
};

// Reads `p` whole in a child running as nobody.
read_result nobody_read(const fs::path& p) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {errno, {}};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    ::alarm(60);  // a mount that stopped answering fails the read, not the test run
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      std::_Exit(255);
    }
    const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);
    if (fd < 0) std::_Exit(errno);
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) std::_Exit(errno);
      if (n == 0) break;
      if (::write(pipefd[1], buf, static_cast<std::size_t>(n)) != n) std::_Exit(EPIPE);
    }
    std::_Exit(0);
  }
  ::close(pipefd[1]);
  read_result r;
  char buf[65536];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    r.data.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.err = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// FS_IOC_ENABLE_VERITY on `fd` with these parameters: 0 or the errno.
int enable_ioctl(int fd, std::uint32_t block_size = 4096, std::uint32_t salt_size = 0,
                 std::uint32_t sig_size = 0, std::uint32_t alg = FS_VERITY_HASH_ALG_SHA256) {
  static std::array<std::uint8_t, 32768> zeros{};
  fsverity_enable_arg arg{};
  arg.version = 1;
  arg.hash_algorithm = alg;
  arg.block_size = block_size;
  arg.salt_size = salt_size;
  arg.salt_ptr = reinterpret_cast<std::uint64_t>(zeros.data());
  arg.sig_size = sig_size;
  arg.sig_ptr = reinterpret_cast<std::uint64_t>(zeros.data());
  return ::ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) == 0 ? 0 : errno;
}

int enable_path(const fs::path& p, std::uint32_t block_size = 4096) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  const int err = enable_ioctl(fd, block_size);
  ::close(fd);
  return err;
}

// The daemon's inode record (trusted.quiesce.verity) on `p` in SOURCE: empty where it is
// there, else why not (a test that needs one skips with it: trusted.* attributes or
// decodable file handles are missing).
std::string no_inode_record(const fs::path& p) {
  char record[256];
  if (::getxattr(p.c_str(), "trusted.quiesce.verity", record, sizeof record) >= 0) return {};
  return std::string("this filesystem keeps no inode record (") + std::strerror(errno) + ")";
}

// FS_IOC_MEASURE_VERITY: the digest's bytes, or empty with `err` set.
std::string measure(int fd, int& err) {
  alignas(fsverity_digest) std::uint8_t buf[sizeof(fsverity_digest) + 64] = {};
  auto* d = reinterpret_cast<fsverity_digest*>(buf);
  d->digest_size = 64;
  err = ::ioctl(fd, FS_IOC_MEASURE_VERITY, d) == 0 ? 0 : errno;
  return err ? std::string()
             : std::string(reinterpret_cast<char*>(buf + sizeof(fsverity_digest)), d->digest_size);
}

long vm_hwm_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// utime + stime of a process, in clock ticks.
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) {
      stime = std::stol(field);
      break;
    }
  }
  return utime + stime;
}

class MountAttack : public quiesce::test::MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    // Outside SOURCE: a root-only file and a root-only directory.
    secret_ = dir_ / "secret";
    std::ofstream(secret_) << secret_text;
    ::chmod(secret_.c_str(), 0600);
    fs::create_directories(vault_ = dir_ / "vault");
    std::ofstream(vault_ / "file") << secret_text;
    ::chmod(vault_.c_str(), 0700);
    // Inside SOURCE: nobody's directory.
    fs::create_directories(user_ = src_ / "u");
    ASSERT_EQ(::chown(user_.c_str(), 65534, 65534), 0);
  }
  // As nobody, in SOURCE: `name` (a file of `content`, owned by nobody).
  void user_file(const std::string& name, const std::string& content) {
    ASSERT_EQ(as_nobody([&] {
                std::ofstream(user_ / name) << content;
                return fs::exists(user_ / name) ? 0 : 1;
              }),
              0);
  }
  // As nobody, in SOURCE: `name` moved aside and replaced by a symlink to `target`.
  void swap_for_symlink(const std::string& name, const fs::path& target) {
    ASSERT_EQ(as_nobody([&] {
                if (::rename((user_ / name).c_str(), (user_ / (name + ".old")).c_str()) != 0) {
                  return 1;
                }
                return ::symlink(target.c_str(), (user_ / name).c_str()) == 0 ? 0 : 2;
              }),
              0);
  }
  bool secret_intact() {
    struct stat st {};
    return slurp(secret_) == secret_text && ::stat(secret_.c_str(), &st) == 0 &&
           (st.st_mode & 07777) == 0600 && st.st_uid == 0;
  }

  fs::path secret_, vault_, user_;
};

// A symlink planted in SOURCE is shown as a symlink: the kernel follows it as the caller,
// the daemon never does.
TEST_F(MountAttack, ASymlinkToARootFileIsNeverFollowedByTheDaemon) {
  SKIP_UNLESS_FUSE();
  ASSERT_EQ(as_nobody([&] { return ::symlink(secret_.c_str(), (user_ / "ln").c_str()) ? 1 : 0; }),
            0);
  start();
  const read_result r = nobody_read(mnt_ / "u" / "ln");
  EXPECT_FALSE(leaked(r.data)) << "the daemon read a root-only file";
  EXPECT_EQ(r.err, EACCES);
  struct stat st {};
  ASSERT_EQ(::lstat((mnt_ / "u" / "ln").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the daemon followed the symlink";
  EXPECT_EQ(fs::read_symlink(mnt_ / "u" / "ln"), secret_);
}

// Looked up, then replaced by a symlink (the file, or a directory above it): what the
// kernel already knows (the name, the attributes it checks permissions with) stays the
// inode it looked up.
TEST_F(MountAttack, SymlinkSwapsAfterLookupNeverReachOutside) {
  SKIP_UNLESS_FUSE();
  user_file("f", mine_text);
  ASSERT_EQ(as_nobody([&] { return ::mkdir((user_ / "d").c_str(), 0755) ? 1 : 0; }), 0);
  ASSERT_EQ(as_nobody([&] {
              std::ofstream(user_ / "d" / "file") << mine_text;
              return 0;
            }),
            0);
  start();
  EXPECT_EQ(nobody_read(mnt_ / "u" / "f").data, mine_text);
  EXPECT_EQ(nobody_read(mnt_ / "u" / "d" / "file").data, mine_text);
  swap_for_symlink("f", secret_);
  swap_for_symlink("d", vault_);
  for (int i = 0; i < 3; ++i) {
    const read_result f = nobody_read(mnt_ / "u" / "f");
    const read_result d = nobody_read(mnt_ / "u" / "d" / "file");
    EXPECT_FALSE(leaked(f.data)) << "read the root-only file";
    EXPECT_FALSE(leaked(d.data)) << "read inside the root-only directory";
  }
}

// chmod, truncate, unlink and rename through a swapped name change nothing outside SOURCE.
TEST_F(MountAttack, ChangesThroughSwappedNamesStayInside) {
  SKIP_UNLESS_FUSE();
  user_file("c", "c\n");
  user_file("t", "t\n");
  ASSERT_EQ(as_nobody([&] { return ::mkdir((user_ / "dd").c_str(), 0755) ? 1 : 0; }), 0);
  start();
  // The kernel learns the names (and that nobody owns them).
  for (const char* n : {"c", "t"})
    EXPECT_EQ(nobody_read(mnt_ / "u" / n).err, 0);
  EXPECT_EQ(as_nobody([&] {
              struct stat st {};
              return ::stat((mnt_ / "u" / "dd").c_str(), &st) == 0 ? 0 : 1;
            }),
            0);
  swap_for_symlink("c", secret_);
  swap_for_symlink("t", secret_);
  swap_for_symlink("dd", vault_);
  as_nobody([&] { return errno_of(::chmod((mnt_ / "u" / "c").c_str(), 0666)); });
  as_nobody([&] { return errno_of(::truncate((mnt_ / "u" / "t").c_str(), 0)); });
  as_nobody([&] { return errno_of(::unlink((mnt_ / "u" / "dd" / "file").c_str())); });
  as_nobody([&] {
    return errno_of(::rename((mnt_ / "u" / "dd" / "file").c_str(), (mnt_ / "u" / "got").c_str()));
  });
  EXPECT_TRUE(secret_intact()) << "a root-only file outside SOURCE was changed";
  EXPECT_EQ(slurp(vault_ / "file"), secret_text) << "a root-only directory was changed";
  EXPECT_FALSE(fs::exists(user_ / "got"));
}

// An enable through a swapped name builds no tree of, and writes nothing beside, a file
// outside SOURCE.
TEST_F(MountAttack, EnableThroughASwappedNameWritesNothingOutside) {
  SKIP_UNLESS_FUSE();
  user_file("e", mine_text);
  start();
  const int rc = as_nobody([&] {
    const int fd = ::open((mnt_ / "u" / "e").c_str(), O_RDONLY);
    if (fd < 0) return 100;
    if (::rename((user_ / "e").c_str(), (user_ / "e.old").c_str()) != 0 ||
        ::symlink(secret_.c_str(), (user_ / "e").c_str()) != 0) {
      return 101;
    }
    return enable_ioctl(fd);
  });
  EXPECT_NE(rc, 100);
  EXPECT_NE(rc, 101);
  EXPECT_FALSE(fs::exists(dir_ / "secret.verity")) << "a sidecar was written outside SOURCE";
  EXPECT_TRUE(secret_intact());
  EXPECT_FALSE(leaked(nobody_read(mnt_ / "u" / "e").data)) << "the enable opened the root file";
}

// A file replaced by a FIFO never holds a daemon thread: with more FIFO opens pending than
// the daemon has threads, the mount still answers.
TEST_F(MountAttack, FifoSwapsDoNotStallTheMount) {
  SKIP_UNLESS_FUSE();
  for (int i = 0; i < 20; ++i)
    user_file("p" + std::to_string(i), "p\n");
  user_file("alive", "alive\n");
  start();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(nobody_read(mnt_ / "u" / ("p" + std::to_string(i))).err, 0);
  ASSERT_EQ(as_nobody([&] {
              for (int i = 0; i < 20; ++i) {
                const fs::path p = user_ / ("p" + std::to_string(i));
                if (::unlink(p.c_str()) != 0 || ::mkfifo(p.c_str(), 0644) != 0) return 1;
              }
              return 0;
            }),
            0);
  std::vector<pid_t> openers;
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Blocks in the kernel until a writer comes (never): killed below.
      ::open((mnt_ / "u" / ("p" + std::to_string(i))).c_str(), O_RDONLY);
      std::_Exit(0);
    }
    openers.push_back(pid);
  }
  // Every opener has reached its open (or finished it) before the mount is asked again.
  EXPECT_TRUE(eventually([&] {
    for (pid_t pid : openers) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), {});
      const std::size_t close = text.rfind(')');
      if (close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'R') {
        return false;
      }
    }
    return true;
  }));
  const read_result alive = nobody_read(mnt_ / "u" / "alive");
  EXPECT_EQ(alive.data, "alive\n") << "the mount stopped answering";
  for (pid_t pid : openers) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

// The kernel's enable refuses a file with a writer (ETXTBSY): an open descriptor or a
// shared writable mapping. Once they are gone it succeeds, and every byte read matches the
// digest it reports.
TEST_F(MountAttack, EnableRefusesWritersAndMappings) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "w", 100'000, 1);
  write_random(src_ / "m", 100'000, 2);
  start();
  const int w = ::open((mnt_ / "w").c_str(), O_RDWR);
  ASSERT_GE(w, 0);
  EXPECT_EQ(enable_path(mnt_ / "w"), ETXTBSY) << "enabled while open for writing";
  {
    // The writer's bytes land after the refused enable: the file is still plain.
    ASSERT_EQ(::pwrite(w, "WRITER", 6, 0), 6);
  }
  const int m = ::open((mnt_ / "m").c_str(), O_RDWR);
  ASSERT_GE(m, 0);
  void* map = ::mmap(nullptr, 100'000, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  ASSERT_NE(map, MAP_FAILED);
  ::close(m);
  EXPECT_EQ(enable_path(mnt_ / "m"), ETXTBSY) << "enabled under a shared writable mapping";
  std::memcpy(map, "MAPPED", 6);
  ::msync(map, 100'000, MS_SYNC);
  ::munmap(map, 100'000);
  ::close(w);
  for (const char* name : {"w", "m"}) {
    // (the release of the closed writer reaches the daemon asynchronously)
    int err = -1;
    ASSERT_TRUE(eventually([&] { return (err = enable_path(mnt_ / name)) != ETXTBSY; })) << name;
    ASSERT_EQ(err, 0) << name;
    const std::string digest = shell2("fsverity digest " + (src_ / name).string()).out;
    const std::string measured = shell2("fsverity measure " + (mnt_ / name).string()).out;
    EXPECT_EQ(digest.substr(0, 71), measured.substr(0, 71)) << name;
    EXPECT_TRUE(slurp(mnt_ / name) == slurp(src_ / name)) << name;
    // Immutable from now on, under any name.
    EXPECT_LT(::open((mnt_ / name).c_str(), O_RDWR), 0);
    EXPECT_EQ(errno, EPERM);
  }
}

// Pages read while a file was plain are never served to its verified open: the owner
// rewrites it in place (same size, same mtime) and enables it in SOURCE; an open that
// reports a digest reads that digest's bytes.
TEST_F(MountAttack, APlainReadsPagesNeverServeAVerifiedOpen) {
  SKIP_UNLESS_FUSE();
  std::string a(65536, 'A'), b(65536, 'B');
  std::ofstream(src_ / "f") << a;
  start();
  ASSERT_TRUE(slurp(mnt_ / "f") == a);  // cached, plain
  struct stat before {};
  ASSERT_EQ(::stat((src_ / "f").c_str(), &before), 0);
  {
    std::fstream io(src_ / "f", std::ios::in | std::ios::out | std::ios::binary);
    io << b;
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (src_ / "f").c_str(), times, 0), 0);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "f").string()).code, 0);
  bool verified_open = false;
  ASSERT_TRUE(eventually([&] {
    const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
    if (fd < 0) return false;
    int err = 0;
    measure(fd, err);
    std::string got(65536, '\0');
    const ssize_t n = ::pread(fd, got.data(), got.size(), 0);
    ::close(fd);
    if (err != 0) return false;  // still the plain node the kernel looked up before
    verified_open = true;
    EXPECT_TRUE(n < 0 || got == b) << "a verified open read the plain file's old pages";
    return true;
  }));
  EXPECT_TRUE(verified_open);
}

// An enable drops what the file's plain opens cached: its owner rewrote it in SOURCE (same
// size and mtime) after a plain read, then enabled it through the mount on that very
// descriptor - which then reads the bytes of the digest it reports.
TEST_F(MountAttack, AnEnableDropsPagesCachedWhilePlain) {
  SKIP_UNLESS_FUSE();
  const std::string a(65536, 'A'), b(65536, 'B');
  std::ofstream(src_ / "f") << a;
  start();
  const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(65536, '\0');
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), 65536);
  ASSERT_TRUE(got == a);
  struct stat before {};
  ASSERT_EQ(::stat((src_ / "f").c_str(), &before), 0);
  {
    std::fstream io(src_ / "f", std::ios::in | std::ios::out | std::ios::binary);
    io << b;
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (src_ / "f").c_str(), times, 0), 0);
  ASSERT_EQ(enable_ioctl(fd), 0);
  int err = 0;
  const std::string digest = measure(fd, err);
  ASSERT_EQ(err, 0);
  const std::string want = shell2("fsverity digest --compact " + (src_ / "f").string()).out;
  std::string hex;
  for (unsigned char c : digest)
    hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
  EXPECT_EQ(hex + "\n", want);
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), 65536);
  EXPECT_TRUE(got == b) << "the descriptor read pages cached before the enable";
  ::close(fd);
}

// A file enabled in SOURCE after the mount looked it up is a verity file at its next open
// (not the plain file the kernel remembers).
TEST_F(MountAttack, AFileEnabledInSourceIsVerityAtItsNextOpen) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "f", 10'000, 11);
  start();
  ASSERT_EQ(slurp(mnt_ / "f").size(), 10'000u);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "f").string()).code, 0);
  const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  int err = 0;
  measure(fd, err);
  EXPECT_EQ(err, 0) << "opened as the plain file it was";
  ::close(fd);
  EXPECT_LT(::open((mnt_ / "f").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EPERM);
}

// A file enabled in SOURCE while a reader holds it open through the mount: the pages that
// reader's plain reads cached were never verified, and once the mount learns of the
// sidecar (a lookup) they are dropped - the open file's next read is verified against the
// new tree, not served from the old cache (here the bytes changed behind the mount's back
// before the enable, so a stale page would differ).
TEST_F(MountAttack, PagesCachedByAnOpenPlainFileGoWhenASidecarAppears) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "f", 64 * 1024, 31);
  start();
  const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string cached(64 * 1024, '\0');
  ASSERT_EQ(::pread(fd, cached.data(), cached.size(), 0), static_cast<ssize_t>(cached.size()));
  struct stat was {};
  ASSERT_EQ(::stat((src_ / "f").c_str(), &was), 0);
  write_random(src_ / "f", 64 * 1024, 32);               // in place, behind the mount's back,
  const timespec times[2] = {was.st_atim, was.st_mtim};  // its times put back (the kernel
  ASSERT_EQ(::utimensat(AT_FDCWD, (src_ / "f").c_str(), times, 0), 0);  // drops pages on them)
  const std::string now = slurp(src_ / "f");
  ASSERT_NE(now, cached);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "f").string()).code, 0);
  // The kernel looks the name up again once its entry times out; the lookup finds the sidecar.
  std::string got(64 * 1024, '\0');
  EXPECT_TRUE(eventually(
      [&] {
        struct stat st {};
        ::stat((mnt_ / "f").c_str(), &st);
        return ::pread(fd, got.data(), got.size(), 0) == static_cast<ssize_t>(got.size()) &&
               got == now;
      },
      std::chrono::seconds(10)))
      << (got == cached ? "the open file still reads the pages cached while it was plain"
                        : "the open file reads neither version");
  ::close(fd);
}

// The tree a closed verity file keeps for its next open (src/mount/retained.hpp) serves only
// the descriptor it was read for: the owner rewrites the file in SOURCE (the same inode)
// with a new sidecar, and the next open reads the new bytes, verified against the new
// digest - never EIO against the kept tree.
TEST_F(MountAttack, AKeptTreeServesOnlyItsDescriptor) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "f", 100'000, 21);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "f").string()).code, 0);
  // A second name the kernel keeps looked up: the inode stays known (and its kept tree with
  // it) while the kernel drops the first name's node for the new one.
  ASSERT_EQ(::link((src_ / "f").c_str(), (src_ / "g").c_str()), 0);
  start();
  ASSERT_TRUE(slurp(mnt_ / "f") == slurp(src_ / "f"));  // verified, closed: its tree is kept
  struct stat held {};
  ASSERT_EQ(::stat((mnt_ / "g").c_str(), &held), 0);
  struct stat before {};
  ASSERT_EQ(::stat((src_ / "f").c_str(), &before), 0);
  fs::remove(src_ / "f.verity");
  write_random(src_ / "f", 100'000, 22);  // in place: O_TRUNC keeps the inode
  struct stat after {};
  ASSERT_EQ(::stat((src_ / "f").c_str(), &after), 0);
  ASSERT_EQ(before.st_ino, after.st_ino);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "f").string()).code, 0);
  const std::string want = slurp(src_ / "f");
  const std::string digest = shell2("fsverity digest --compact " + (src_ / "f").string()).out;
  std::string got, measured;
  int read_errno = 0;
  // The kernel keeps the old name for up to the attribute timeout; then it looks it up again.
  EXPECT_TRUE(eventually([&] {
    const int fd = ::open((mnt_ / "f").c_str(), O_RDONLY);
    if (fd < 0) return false;
    int err = 0;
    const std::string d = measure(fd, err);
    measured.clear();
    for (unsigned char c : d)
      measured += "0123456789abcdef"[c >> 4], measured += "0123456789abcdef"[c & 15];
    got.assign(want.size(), '\0');
    const ssize_t n = ::pread(fd, got.data(), got.size(), 0);
    read_errno = n < 0 ? errno : 0;
    ::close(fd);
    if (n != static_cast<ssize_t>(want.size())) got.clear();
    // The old node reads its cached pages; only a tree of the old digest fails (at once).
    return read_errno != 0 || (measured + "\n" == digest && got == want);
  })) << "the open measures "
      << measured << " (want " << digest << ")";
  EXPECT_EQ(read_errno, 0) << std::strerror(read_errno) << ": the old digest's kept tree was used";
  EXPECT_TRUE(got == want);
}

// A second name of a verity file is a verity file; a source-side hard link too, once the
// mount knows the inode.
TEST_F(MountAttack, HardLinksOfAVerityFileAreImmutable) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "v", 50'000, 3);
  start();
  ASSERT_EQ(enable_path(mnt_ / "v"), 0);
  ASSERT_EQ(::link((mnt_ / "v").c_str(), (mnt_ / "v2").c_str()), 0) << std::strerror(errno);
  EXPECT_LT(::open((mnt_ / "v2").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(shell2("fsverity measure " + (mnt_ / "v2").string()).out.substr(0, 71),
            shell2("fsverity measure " + (mnt_ / "v").string()).out.substr(0, 71));
  ASSERT_EQ(::link((src_ / "v").c_str(), (src_ / "v3").c_str()), 0);
  EXPECT_LT(::open((mnt_ / "v3").c_str(), O_RDWR), 0) << "a hard link of a verity file opened "
                                                         "for writing";
  EXPECT_EQ(errno, EPERM);
  EXPECT_TRUE(slurp(mnt_ / "v3") == slurp(src_ / "v"));
}

// A file that has several names already is enabled through any of them where the source
// keeps inode records - its other names, in other directories too, reach the sidecar
// through the record: verity files to this mount and to a fresh one, refusing writers, and
// still after the name the sidecar lies beside is removed - as the kernel enables a file
// whatever its link count. Where no record can be kept it is EMLINK: a name that could not
// find the sidecar would read plain and take writers.
TEST_F(MountAttack, AFileWithSeveralNamesIsEnabledWhereRecordsAreKept) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "two", 50'000, 4);
  fs::create_directory(src_ / "elsewhere");
  ASSERT_EQ(::link((src_ / "two").c_str(), (src_ / "two-b").c_str()), 0);
  ASSERT_EQ(::link((src_ / "two").c_str(), (src_ / "elsewhere" / "two-c").c_str()), 0);
  start();
  const int err = enable_path(mnt_ / "two");
  char record[256];
  if (::getxattr((src_ / "two").c_str(), "trusted.quiesce.verity", record, sizeof record) < 0 &&
      errno != ENODATA) {
    EXPECT_EQ(err, EMLINK) << "a file with three names enabled where no record can be kept";
    EXPECT_FALSE(fs::exists(src_ / "two.verity"));
    return;
  }
  ASSERT_EQ(err, 0) << std::strerror(err);
  const std::string measured = shell2("fsverity measure " + (mnt_ / "two").string()).out;
  ASSERT_EQ(measured.rfind("sha256:", 0), 0u) << measured;
  EXPECT_EQ(enable_path(mnt_ / "two-b"), EEXIST) << "enabled twice through another name";
  auto every_name_is_the_file = [&](const char* when) {
    SCOPED_TRACE(when);
    for (const fs::path& name : {fs::path("two-b"), fs::path("elsewhere") / "two-c"}) {
      SCOPED_TRACE(name.string());
      EXPECT_EQ(shell2("fsverity measure " + (mnt_ / name).string()).out.substr(0, 71),
                measured.substr(0, 71));
      EXPECT_LT(::open((mnt_ / name).c_str(), O_WRONLY), 0);
      EXPECT_EQ(errno, EPERM);
    }
  };
  every_name_is_the_file("the mount that enabled it");
  stop();
  start();
  every_name_is_the_file("a fresh mount");
  ASSERT_EQ(::unlink((mnt_ / "two").c_str()), 0) << std::strerror(errno);
  stop();
  start();
  every_name_is_the_file("a fresh mount, after the sidecar's name was removed");
  stop();
}

// Where the source cannot keep an inode record, a file with several names is EMLINK and
// leaves no sidecar: here SOURCE is a ramfs, which has no extended attributes.
TEST_F(MountAttack, AFileWithSeveralNamesIsEmlinkWhereNoRecordCanBeKept) {
  SKIP_UNLESS_FUSE();
  if (shell2("mount -t ramfs quiesce-test " + src_.string()).code != 0) {
    GTEST_SKIP() << "cannot mount a ramfs here";
  }
  const unmount_at unmount_src{src_};
  ::chmod(src_.c_str(), 0755);
  write_random(src_ / "two", 20'000, 5);
  ASSERT_EQ(::link((src_ / "two").c_str(), (src_ / "two-b").c_str()), 0);
  write_random(src_ / "one", 20'000, 6);
  start();
  EXPECT_EQ(enable_path(mnt_ / "two"), EMLINK);
  EXPECT_FALSE(fs::exists(src_ / "two.verity")) << "an EMLINK enable left its sidecar";
  EXPECT_NE(shell2("fsverity measure " + (mnt_ / "two-b").string()).code, 0);
  const int writer = ::open((mnt_ / "two-b").c_str(), O_WRONLY);
  EXPECT_GE(writer, 0) << "the plain file refuses writers: " << std::strerror(errno);
  if (writer >= 0) ::close(writer);
  // A file with one name is enabled there all the same: its sidecar lies beside it.
  EXPECT_EQ(enable_path(mnt_ / "one"), 0);
  EXPECT_TRUE(fs::exists(src_ / "one.verity"));
  stop();
  for (const auto& entry : fs::directory_iterator(src_))
    fs::remove(entry.path());
}

// Where the record cannot be written after all - here the file's extended attributes fill
// its filesystem's room for them (ENOSPC) - an enable of a file with several names is
// undone: EMLINK, its sidecar taken back, the file plain and writable through every name.
// A file with one name whose record cannot be written is enabled (its sidecar lies beside
// its only name).
TEST_F(MountAttack, AnEnableWhoseRecordCannotBeWrittenIsUndone) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "two", 20'000, 7);
  write_random(src_ / "one", 20'000, 8);
  // Attributes, largest first, until the file takes no more of any size.
  auto fill = [](const fs::path& p) {
    int n = 0;
    for (std::size_t size : {65536u, 16384u, 4096u, 1024u, 256u, 64u, 16u, 4u, 1u}) {
      const std::string value(size, 'x');
      while (n < 4096 && ::setxattr(p.c_str(), ("user.fill" + std::to_string(n)).c_str(),
                                    value.data(), value.size(), XATTR_CREATE) == 0) {
        ++n;
      }
      if (errno != ENOSPC && errno != E2BIG && errno != ERANGE) return false;
    }
    return n < 4096 && ::setxattr(p.c_str(), "trusted.quiesce.probe", "", 0, XATTR_CREATE) != 0;
  };
  if (!fill(src_ / "two") || !fill(src_ / "one")) {
    GTEST_SKIP() << "SOURCE's filesystem does not run out of room for attributes";
  }
  ASSERT_EQ(::link((src_ / "two").c_str(), (src_ / "two-b").c_str()), 0);
  start();
  EXPECT_EQ(enable_path(mnt_ / "two"), EMLINK);
  EXPECT_FALSE(fs::exists(src_ / "two.verity")) << "an undone enable left its sidecar";
  for (const char* name : {"two", "two-b"}) {
    EXPECT_NE(shell2("fsverity measure " + (mnt_ / name).string()).code, 0) << name;
    const int writer = ::open((mnt_ / name).c_str(), O_WRONLY);
    EXPECT_GE(writer, 0) << name << ": the plain file refuses writers: " << std::strerror(errno);
    if (writer >= 0) ::close(writer);
  }
  EXPECT_EQ(enable_path(mnt_ / "one"), 0);
  EXPECT_TRUE(fs::exists(src_ / "one.verity"));
  stop();
}

// A hard link made in SOURCE to a verity file is a verity file to a mount that has never
// seen the file's verity name: an enable leaves its record on the inode (inode_record.cpp).
// Through the fresh mount the link measures as the file does, refuses writers, and a byte
// its owner changes in SOURCE is an error to its reader, never a wrong byte - through the
// link read first (before, the link read plain) and through the file's own name.
TEST_F(MountAttack, AHardLinkMadeInSourceIsVerityToAFreshMount) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "v", 50'000, 41);
  start();
  ASSERT_EQ(enable_path(mnt_ / "v"), 0);
  if (const std::string why = no_inode_record(src_ / "v"); !why.empty()) GTEST_SKIP() << why;
  const std::string measured = shell2("fsverity measure " + (mnt_ / "v").string()).out;
  const std::string want = slurp(src_ / "v");
  stop();
  for (const bool cli : {false, true}) {
    SCOPED_TRACE(cli ? "enabled by `quiesce verity enable` as root" : "enabled through the mount");
    if (cli) {  // the same, enabled in SOURCE by root's `quiesce verity enable`
      fs::remove(src_ / "w");
      write_random(src_ / "w", 50'000, 41);
      ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "w").string()).code,
                0);
    }
    const fs::path file = src_ / (cli ? "w" : "v");
    const fs::path link = src_ / (cli ? "w-link" : "v-link");
    fs::remove(link);
    ASSERT_EQ(::link(file.c_str(), link.c_str()), 0);
    start();
    const fs::path through = mnt_ / link.filename();
    EXPECT_EQ(shell2("fsverity measure " + through.string()).out.substr(0, 71),
              measured.substr(0, 71))
        << "the link is not a verity file to a fresh mount";
    EXPECT_LT(::open(through.c_str(), O_WRONLY), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_TRUE(slurp(through) == want);
    stop();
    // The owner changes one byte in SOURCE (the same inode): a fresh mount's reader of the
    // link gets an error, not the byte.
    {
      const int fd = ::open(file.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      char byte = 0;
      ASSERT_EQ(::pread(fd, &byte, 1, 20'000), 1);
      byte = static_cast<char>(~byte);
      ASSERT_EQ(::pwrite(fd, &byte, 1, 20'000), 1);
      ::close(fd);
    }
    start();
    const int fd = ::open(through.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::string got(want.size(), '\0');
    std::size_t done = 0;
    int err = 0;
    while (done < got.size()) {
      const ssize_t n = ::pread(fd, got.data() + done, got.size() - done, static_cast<off_t>(done));
      if (n <= 0) {
        err = n < 0 ? errno : 0;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    EXPECT_EQ(err, EIO) << "read " << done << " bytes of a tampered verity file through its "
                        << "hard link, then " << std::strerror(err);
    EXPECT_LE(done, 20'000u) << "the changed byte was read";
    EXPECT_TRUE(got.compare(0, done, want, 0, done) == 0);
    stop();
  }
}

// A verity file without an inode record - enabled before records existed, or its record
// lost - gets one the first time a mount looks it up by the name its sidecar lies beside,
// and from then on a hard link made in SOURCE is a verity file to a fresh mount too.
TEST_F(MountAttack, AVerityFileWithoutARecordGetsOneWhenAMountSeesIt) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "old", 30'000, 43);
  start();
  ASSERT_EQ(enable_path(mnt_ / "old"), 0);
  const std::string measured = shell2("fsverity measure " + (mnt_ / "old").string()).out;
  stop();
  if (const std::string why = no_inode_record(src_ / "old"); !why.empty()) GTEST_SKIP() << why;
  // As a file enabled before the record existed.
  ASSERT_EQ(::removexattr((src_ / "old").c_str(), "trusted.quiesce.verity"), 0);
  // A read-only mount changes nothing in SOURCE: its lookup leaves no record.
  start("-o ro");
  struct stat st {};
  ASSERT_EQ(::stat((mnt_ / "old").c_str(), &st), 0) << std::strerror(errno);  // a lookup
  stop();
  EXPECT_FALSE(no_inode_record(src_ / "old").empty()) << "a read-only mount wrote the inode record";
  start();
  ASSERT_EQ(::stat((mnt_ / "old").c_str(), &st), 0) << std::strerror(errno);  // a lookup
  stop();
  EXPECT_EQ(no_inode_record(src_ / "old"), "") << "a lookup of the verity name left no record";
  ASSERT_EQ(::link((src_ / "old").c_str(), (src_ / "old-link").c_str()), 0);
  start();
  const fs::path through = mnt_ / "old-link";
  EXPECT_EQ(shell2("fsverity measure " + through.string()).out.substr(0, 71),
            measured.substr(0, 71))
      << "the link is not a verity file to a fresh mount";
  EXPECT_LT(::open(through.c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EPERM);
  stop();
}

// Removing, through the mount, the name a verity file's sidecar lies beside - an unlink, or a
// rename over it - leaves the file's other names (hard links made in SOURCE) verity files
// to a fresh mount: the sidecar is kept under a hidden name (kept_sidecar.cpp) while the
// file has a name, and goes with the file's last one.
TEST_F(MountAttack, RemovingTheSidecarsNameLeavesTheOtherNamesVerity) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "a", 40'000, 44);
  write_random(src_ / "c", 20'000, 45);
  start();
  ASSERT_EQ(enable_path(mnt_ / "a"), 0);
  ASSERT_EQ(enable_path(mnt_ / "c"), 0);
  const std::string measured_a = shell2("fsverity measure " + (mnt_ / "a").string()).out;
  const std::string measured_c = shell2("fsverity measure " + (mnt_ / "c").string()).out;
  stop();
  if (const std::string why = no_inode_record(src_ / "a"); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(::link((src_ / "a").c_str(), (src_ / "b").c_str()), 0);
  ASSERT_EQ(::link((src_ / "c").c_str(), (src_ / "d").c_str()), 0);
  write_random(src_ / "e", 1'000, 46);
  auto kept_in_source = [&] {
    std::vector<std::string> kept;
    for (const auto& entry : fs::directory_iterator(src_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(".quiesce-kept.", 0) == 0) kept.push_back(name);
    }
    return kept;
  };
  start();
  ASSERT_EQ(::unlink((mnt_ / "a").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::rename((mnt_ / "e").c_str(), (mnt_ / "c").c_str()), 0) << std::strerror(errno);
  for (const auto& entry : fs::directory_iterator(mnt_)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".quiesce-kept.", 0), std::string::npos)
        << "the mount lists its kept sidecar " << entry.path();
  }
  EXPECT_EQ(kept_in_source().size(), 2u);
  for (const std::string& kept : kept_in_source()) {
    EXPECT_NE(::unlink((mnt_ / kept).c_str()), 0) << "a kept sidecar removed through the mount";
    EXPECT_EQ(errno, ENOENT);
  }
  stop();
  start();
  for (const auto& [name, measured] : {std::pair{"b", measured_a}, std::pair{"d", measured_c}}) {
    SCOPED_TRACE(name);
    const fs::path through = mnt_ / name;
    EXPECT_EQ(shell2("fsverity measure " + through.string()).out.substr(0, 71),
              measured.substr(0, 71))
        << "the other name is not a verity file to a fresh mount";
    EXPECT_LT(::open(through.c_str(), O_WRONLY), 0);
    EXPECT_EQ(errno, EPERM);
  }
  EXPECT_NE(shell2("fsverity measure " + (mnt_ / "c").string()).code, 0)
      << "the file renamed over a verity name took its verity";
  // The last names go: so do the kept sidecars.
  ASSERT_EQ(::unlink((mnt_ / "b").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::unlink((mnt_ / "d").c_str()), 0) << std::strerror(errno);
  stop();
  EXPECT_TRUE(kept_in_source().empty()) << kept_in_source().front();
}

// The kept sidecar goes with the file's last name also where that name is in another
// directory - through an unlink and through a rename over it - so the directory it was kept
// in empties, and can be removed through the mount. A directory moved out of SOURCE is not
// followed: the daemon touches nothing outside SOURCE.
TEST_F(MountAttack, AKeptSidecarGoesWithALastNameInAnotherDirectory) {
  SKIP_UNLESS_FUSE();
  for (const char* d : {"kept", "other", "kept2", "other2", "kept3"})
    fs::create_directory(src_ / d);
  write_random(src_ / "kept" / "a", 30'000, 47);
  write_random(src_ / "kept2" / "c", 30'000, 48);
  write_random(src_ / "kept3" / "e", 30'000, 49);
  write_random(src_ / "other2" / "new", 1'000, 50);
  start();
  for (const char* p : {"kept/a", "kept2/c", "kept3/e"})
    ASSERT_EQ(enable_path(mnt_ / p), 0) << p;
  stop();
  if (const std::string why = no_inode_record(src_ / "kept" / "a"); !why.empty()) {
    GTEST_SKIP() << why;
  }
  ASSERT_EQ(::link((src_ / "kept" / "a").c_str(), (src_ / "other" / "b").c_str()), 0);
  ASSERT_EQ(::link((src_ / "kept2" / "c").c_str(), (src_ / "other2" / "d").c_str()), 0);
  ASSERT_EQ(::link((src_ / "kept3" / "e").c_str(), (src_ / "other" / "f").c_str()), 0);
  auto entries = [](const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  };
  const fs::path outside = dir_ / "outside-source";
  start();
  for (const char* p : {"kept/a", "kept2/c", "kept3/e"}) {
    ASSERT_EQ(::unlink((mnt_ / p).c_str()), 0) << p << ": " << std::strerror(errno);
  }
  ASSERT_EQ(entries(src_ / "kept").size(), 1u) << "no sidecar kept for the other name";
  // The last names, in another directory than the kept sidecars.
  ASSERT_EQ(::unlink((mnt_ / "other" / "b").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::rename((mnt_ / "other2" / "new").c_str(), (mnt_ / "other2" / "d").c_str()), 0)
      << std::strerror(errno);
  EXPECT_TRUE(entries(src_ / "kept").empty()) << entries(src_ / "kept").front();
  EXPECT_TRUE(entries(src_ / "kept2").empty()) << entries(src_ / "kept2").front();
  EXPECT_EQ(::rmdir((mnt_ / "kept").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(::rmdir((mnt_ / "kept2").c_str()), 0) << std::strerror(errno);
  // A kept sidecar's directory moved out of SOURCE: its last name's removal leaves it there.
  ASSERT_EQ(::rename((src_ / "kept3").c_str(), outside.c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::unlink((mnt_ / "other" / "f").c_str()), 0) << std::strerror(errno);
  stop();
  EXPECT_EQ(entries(outside).size(), 1u) << "the daemon removed a file outside SOURCE";
}

// Two mounts of one SOURCE, a verity file's last two names unlinked at once, one through
// each (one mount serializes them: the kernel holds the file's inode lock across an
// unlink), one beside the sidecar and one in another directory, for many files: whichever
// way the two daemons interleave, no kept sidecar is left (the keeper looks at the link
// count again once it has kept the sidecar and noted where; the last name follows the note).
TEST_F(MountAttack, RacingUnlinksOfTheLastTwoNamesLeaveNoKeptSidecar) {
  SKIP_UNLESS_FUSE();
  // Enough races that a keeper without its second look leaves some (3-12 of 256 here, the
  // release mutant's suite); a quarter of them under the sanitizers, 4-10 times slower.
  const int files = std::string(QUIESCE_SANITIZE).empty() ? 256 : 64;
  fs::create_directory(src_ / "k");
  fs::create_directory(src_ / "o");
  for (int i = 0; i < files; ++i) {
    write_random(src_ / "k" / ("a" + std::to_string(i)), 4'000, 60 + i);
  }
  start();
  for (int i = 0; i < files; ++i) {
    ASSERT_EQ(enable_path(mnt_ / "k" / ("a" + std::to_string(i))), 0) << i;
  }
  stop();
  if (const std::string why = no_inode_record(src_ / "k" / "a0"); !why.empty()) {
    GTEST_SKIP() << why;
  }
  for (int i = 0; i < files; ++i) {
    const std::string n = std::to_string(i);
    ASSERT_EQ(::link((src_ / "k" / ("a" + n)).c_str(), (src_ / "o" / ("b" + n)).c_str()), 0);
  }
  const fs::path second = dir_ / "mnt2";
  fs::create_directory(second);
  start();
  const auto mounted =
      shell2(quiesce::test::mount_cli() + " verity mount " + src_.string() + " " + second.string());
  ASSERT_EQ(mounted.code, 0) << mounted.out;
  const unmount_at unmount_second{second};
  for (int i = 0; i < files; ++i) {
    const std::string n = std::to_string(i);
    std::atomic<int> ready{0};
    int errs[2] = {-1, -1};
    auto unlink_at_once = [&](const fs::path& p, int& err) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      err = ::unlink(p.c_str()) == 0 ? 0 : errno;
    };
    std::thread a(unlink_at_once, mnt_ / "k" / ("a" + n), std::ref(errs[0]));
    std::thread b(unlink_at_once, second / "o" / ("b" + n), std::ref(errs[1]));
    a.join();
    b.join();
    EXPECT_EQ(errs[0], 0) << i;
    EXPECT_EQ(errs[1], 0) << i;
  }
  for (const char* d : {"k", "o"}) {
    for (const auto& entry : fs::directory_iterator(src_ / d)) {
      ADD_FAILURE() << "left in SOURCE: " << entry.path();
    }
  }
  stop();
}

// A sidecar replaced in SOURCE by an identical copy (a restore, cp + mv) while the mount
// knows the file: the inode record points to a removed file then, and a removal of the
// sidecar's name through the mount writes it anew for the copy and keeps the copy, so the
// file's other name stays verity to a fresh mount. The kept sidecar's name is not one a
// user can guess (random), nor a sidecar's name (it does not end in ".verity").
TEST_F(MountAttack, ASidecarReplacedByACopyIsKeptForTheOtherNames) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "a", 30'000, 48);
  start();
  ASSERT_EQ(enable_path(mnt_ / "a"), 0);
  const std::string measured = shell2("fsverity measure " + (mnt_ / "a").string()).out;
  if (const std::string why = no_inode_record(src_ / "a"); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(::link((src_ / "a").c_str(), (src_ / "b").c_str()), 0);
  struct stat st {};
  ASSERT_EQ(::stat((mnt_ / "b").c_str(), &st), 0);
  fs::copy_file(src_ / "a.verity", src_ / "copy");
  fs::rename(src_ / "copy", src_ / "a.verity");
  ASSERT_EQ(::unlink((mnt_ / "a").c_str()), 0) << std::strerror(errno);
  stop();
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(src_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".quiesce-kept.", 0) == 0) kept.push_back(name);
  }
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].size(), std::string(".quiesce-kept.").size() + 16 + 12) << kept[0];
  EXPECT_TRUE(kept[0].ends_with(".verity-kept")) << kept[0];
  start();
  EXPECT_EQ(shell2("fsverity measure " + (mnt_ / "b").string()).out.substr(0, 71),
            measured.substr(0, 71))
      << "the other name is not a verity file to a fresh mount";
  EXPECT_LT(::open((mnt_ / "b").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::stat((mnt_ / kept[0]).c_str(), &st), 0) << "the kept sidecar is visible";
  ASSERT_EQ(::unlink((mnt_ / "b").c_str()), 0) << std::strerror(errno);
  stop();
  EXPECT_FALSE(fs::exists(src_ / kept[0])) << "the kept sidecar outlived the file's last name";
}

// The source's own inode flags show through the mount (lsattr: FS_IOC_GETFLAGS), and an
// append-only file cannot be enabled (EPERM, the kernel's IS_APPEND check, after EBADF and
// before EISDIR); FS_IOC_READ_VERITY_METADATA on a file that is not verity is ENODATA.
TEST_F(MountAttack, AppendOnlyIsShownAndCannotBeEnabled) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "log", 10'000, 6);
  if (shell2("chattr +a " + (src_ / "log").string()).code != 0) {
    GTEST_SKIP() << "SOURCE's filesystem has no append-only flag";
  }
  start();
  const int fd = ::open((mnt_ / "log").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  int flags = 0;
  EXPECT_EQ(::ioctl(fd, FS_IOC_GETFLAGS, &flags), 0) << std::strerror(errno);
  EXPECT_TRUE(flags & FS_APPEND_FL) << "flags 0x" << std::hex << flags;
  EXPECT_FALSE(flags & FS_VERITY_FL);
  EXPECT_EQ(enable_ioctl(fd), EPERM);
  fsverity_read_metadata_arg arg{};
  arg.metadata_type = FS_VERITY_METADATA_TYPE_MERKLE_TREE;
  EXPECT_LT(::ioctl(fd, FS_IOC_READ_VERITY_METADATA, &arg), 0);
  EXPECT_EQ(errno, ENODATA);
  ::close(fd);
  shell2("chattr -a " + (src_ / "log").string());  // or the fixture cannot remove it
}

// On a read-only mount enable answers EROFS before anything else the caller lacks, as the
// kernel's write-permission check does (its sb_permission comes first): a file the caller
// may not write, and a directory, are EROFS - not EACCES, not EISDIR.
TEST_F(MountAttack, EnableOnAReadOnlyMountIsErofsFirst) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "roots", 10'000, 7);
  ::chmod((src_ / "roots").c_str(), 0644);
  start("-o ro");
  EXPECT_EQ(as_nobody([&] { return enable_path(mnt_ / "roots"); }), EROFS);
  EXPECT_EQ(as_nobody([&] {
              const int fd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY);
              if (fd < 0) return 200;
              const int err = enable_ioctl(fd);
              ::close(fd);
              return err;
            }),
            EROFS);
}

// Enabling needs write permission, as the kernel's (EACCES): a reader cannot make root's
// file immutable.
TEST_F(MountAttack, EnableWithoutWritePermissionIsEacces) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "roots", 10'000, 5);
  ::chmod((src_ / "roots").c_str(), 0644);
  start();
  EXPECT_EQ(as_nobody([&] {
              const int fd = ::open((mnt_ / "roots").c_str(), O_RDONLY);
              return fd < 0 ? 100 : enable_ioctl(fd);
            }),
            EACCES);
  EXPECT_FALSE(fs::exists(src_ / "roots.verity"));
}

// Two enables of one file at once: one succeeds, the other is EBUSY (or EEXIST if it came
// second), and the sidecar is whole.
TEST_F(MountAttack, ConcurrentEnablesOneWins) {
  SKIP_UNLESS_FUSE();
  {
    std::ofstream out(src_ / "big", std::ios::binary);
    std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 64; ++i)
      out << chunk;
  }
  start();
  for (int round = 0; round < 3; ++round) {
    const std::string name = "big" + std::to_string(round);
    if (round > 0) fs::copy_file(src_ / "big", src_ / name);
    const fs::path p = mnt_ / (round > 0 ? name : "big");
    int pipes[2][2];
    pid_t pids[2];
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(::pipe(pipes[i]), 0);
      pids[i] = ::fork();
      if (pids[i] == 0) {
        const int fd = ::open(p.c_str(), O_RDONLY);
        char go;
        if (::read(pipes[i][0], &go, 1) != 1) std::_Exit(250);
        std::_Exit(fd < 0 ? 251 : enable_ioctl(fd));
      }
    }
    for (int i = 0; i < 2; ++i)
      ASSERT_EQ(::write(pipes[i][1], "g", 1), 1);
    int codes[2];
    for (int i = 0; i < 2; ++i) {
      int status = 0;
      ::waitpid(pids[i], &status, 0);
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      ::close(pipes[i][0]);
      ::close(pipes[i][1]);
    }
    EXPECT_EQ((codes[0] == 0) + (codes[1] == 0), 1) << codes[0] << " " << codes[1];
    for (int c : codes)
      EXPECT_TRUE(c == 0 || c == EBUSY || c == EEXIST) << c;
    EXPECT_EQ(shell2("fsverity measure " + p.string()).out.substr(0, 71),
              shell2("fsverity digest " + (src_ / (round > 0 ? name : "big")).string())
                  .out.substr(0, 71));
  }
}

// The kernel's parameter ranges, at both ends, with its errno values, before any work: a
// block size of 2^30 is EINVAL without the daemon allocating it.
TEST_F(MountAttack, EnableParametersHaveTheKernelsRangeAndCostNothingWhenRefused) {
  SKIP_UNLESS_FUSE();
  start();
  const long page = ::sysconf(_SC_PAGESIZE);
  const long hwm_before = vm_hwm_kib(pid_);
  struct param_case {
    std::uint32_t block_size, salt_size, sig_size, alg;
    int want;
  };
  const std::vector<param_case> cases = {
      {std::uint32_t{1} << 30, 0, 0, 1, EINVAL},
      {512, 0, 0, 1, EINVAL},
      {3000, 0, 0, 1, EINVAL},
      {static_cast<std::uint32_t>(page) * 2, 0, 0, 1, EINVAL},
      {4096, 33, 0, 1, EMSGSIZE},
      {4096, 0, 16129, 1, EMSGSIZE},
      // Signatures within the size range, and no trusted certificate: the kernel's ENOKEY
      // (its .fs-verity keyring empty), before the signature is parsed.
      {4096, 0, 16128, 1, ENOKEY},
      {4096, 0, 1, 1, ENOKEY},
      {4096, 0, 0, 3, EINVAL},
      {4096, 0, 0, 0, EINVAL},
      {1024, 32, 0, 2, 0},
      {static_cast<std::uint32_t>(page), 0, 0, 1, 0},
  };
  int i = 0;
  for (const param_case& c : cases) {
    const fs::path p = src_ / ("f" + std::to_string(i++));
    write_random(p, 3, static_cast<unsigned>(i));
    const int fd = ::open((mnt_ / p.filename()).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(enable_ioctl(fd, c.block_size, c.salt_size, c.sig_size, c.alg), c.want)
        << "block " << c.block_size << " salt " << c.salt_size << " sig " << c.sig_size << " alg "
        << c.alg;
    ::close(fd);
  }
  // Refusals allocate nothing: the daemon's peak stays within 64 MiB of where it was.
  EXPECT_LT(vm_hwm_kib(pid_) - hwm_before, 64 * 1024);
  // An ioctl on a directory is the kernel's EISDIR, never a file handle's answer.
  const int dir = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0);
  EXPECT_EQ(enable_ioctl(dir), EISDIR);
  int err = 0;
  measure(dir, err);
  EXPECT_EQ(err, ENODATA);
  ::close(dir);
}

// An enable whose caller is interrupted stops (FUSE_INTERRUPT): the daemon says so and
// writes no sidecar.
TEST_F(MountAttack, AnInterruptedEnableStops) {
  SKIP_UNLESS_FUSE();
  {
    // 16 GiB of holes: minutes to hash.
    const int fd = ::open((src_ / "huge").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t{16} << 30), 0);
    ::close(fd);
  }
  start();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open((mnt_ / "huge").c_str(), O_RDONLY);
    std::_Exit(fd < 0 ? 251 : enable_ioctl(fd));
  }
  // The enable is with the daemon: its caller is in ioctl(2) (syscall 16 on x86-64) and the
  // daemon has spent a fifth of a second of CPU since.
  const long cpu_before = cpu_ticks(pid_);
  ASSERT_TRUE(eventually([&] {
    std::ifstream sc("/proc/" + std::to_string(pid) + "/syscall");
    std::string nr;
    sc >> nr;
    return nr == "16" && cpu_ticks(pid_) - cpu_before >= ::sysconf(_SC_CLK_TCK) / 5;
  }));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(eventually([&] { return daemon_log().find("interrupted") != std::string::npos; }))
      << "the enable went on after its caller died: " << daemon_log();
  EXPECT_FALSE(fs::exists(src_ / "huge.verity"));
}

// A file named like a sidecar that is not one is an ordinary file, and the file it seems
// to belong to stays readable.
TEST_F(MountAttack, AFileNamedLikeASidecarIsAnOrdinaryFile) {
  SKIP_UNLESS_FUSE();
  std::ofstream(src_ / "notes") << "notes\n";
  std::ofstream(src_ / "notes.verity") << "not a sidecar\n";
  user_file("x", "x\n");
  start();
  EXPECT_EQ(slurp(mnt_ / "notes"), "notes\n");
  EXPECT_EQ(slurp(mnt_ / "notes.verity"), "not a sidecar\n");
  // Another user cannot turn nobody's file into a verity file with a sidecar of their own
  // (a sidecar of other bytes: taken for x's, it would fail x's reads).
  std::ofstream(dir_ / "y") << "y\n";
  ASSERT_EQ(
      shell2(std::string(QUIESCE_CLI) + " verity enable " + (dir_ / "y").string() + " --sidecar " +
             (user_ / "x.verity").string() + " && chown 1:1 " + (user_ / "x.verity").string())
          .code,
      0);
  EXPECT_EQ(nobody_read(mnt_ / "u" / "x").data, "x\n");
}

// SIGTERM while reads wait on the verification queue: every one is answered or failed
// before the session goes (valgrind finds no invalid access in the release build; the
// sanitizer builds check the same themselves).
TEST_F(MountAttack, SigtermWithReadsInFlightIsClean) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "r", 8 << 20, 9);
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "r").string()).code, 0);
  const bool valgrind =
      std::string(QUIESCE_SANITIZE).empty() && shell2("command -v valgrind").code == 0;
  start("", valgrind ? "valgrind -q --error-exitcode=99 --trace-children=no" : "");
  std::vector<pid_t> readers;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char> buf(1 << 20);
      for (;;) {
        const int fd = ::open((mnt_ / "r").c_str(), O_RDONLY | O_DIRECT);
        if (fd < 0) std::_Exit(0);
        for (off_t at = 0; ::pread(fd, buf.data(), buf.size(), at) > 0; at += 1 << 20) {
        }
        ::close(fd);
      }
    }
    readers.push_back(pid);
  }
  // The readers are reading (the queue has run verification items) before the signal.
  ASSERT_TRUE(eventually([&] { return nobody_read(mnt_ / "r").data.size() == (8u << 20); }));
  const int status = stop(SIGTERM);
  for (pid_t pid : readers) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << status << ": " << daemon_log();
  EXPECT_FALSE(quiesce::test::is_mount_point(mnt_));
}

// Every node the kernel keeps looked up holds a descriptor in the daemon, and the kernel
// forgets nodes only under memory pressure: a user who stats more files than the daemon's
// soft descriptor limit must not make every later lookup and open fail (EMFILE) for every
// user. The daemon raises its soft limit to the hard one at start.
TEST_F(MountAttack, LookupsPastTheSoftDescriptorLimitStillServeEveryone) {
  SKIP_UNLESS_FUSE();
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  constexpr int files = 300;
  if (lim.rlim_max < 4 * files) GTEST_SKIP() << "the hard descriptor limit is " << lim.rlim_max;
  fs::create_directories(user_ / "many");
  for (int i = 0; i < files; ++i)
    std::ofstream(user_ / "many" / ("f" + std::to_string(i))) << i;
  std::ofstream(src_ / "shared") << "for everyone\n";
  start("", "prlimit --nofile=64:");  // a soft limit below the files, the hard one kept
  const int stats = as_nobody([&] {
    for (int i = 0; i < files; ++i) {
      struct stat st {};
      if (::stat((mnt_ / "u" / "many" / ("f" + std::to_string(i))).c_str(), &st) != 0) {
        return errno;
      }
    }
    return 0;
  });
  EXPECT_EQ(stats, 0) << std::strerror(stats) << ": a lookup failed after others were kept";
  const read_result r = nobody_read(mnt_ / "shared");
  EXPECT_EQ(r.err, 0) << std::strerror(r.err);
  EXPECT_EQ(r.data, "for everyone\n");
}

// A root daemon writes users' data with its own credentials: none of its threads may
// have CAP_SYS_RESOURCE in effect, which would let a user's writes through the mount past
// disk quotas and into the blocks ext4 reserves for root (review: a user filled a -m 50
// filesystem to 100% through the mount, where writing directly stopped at ENOSPC).
TEST_F(MountAttack, NoDaemonThreadWritesWithCapSysResource) {
  SKIP_UNLESS_FUSE();
  {
    std::ifstream in("/proc/self/status");
    unsigned long long own = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("CapEff:", 0) == 0) own = std::stoull(line.substr(7), nullptr, 16);
    }
    if (!(own & (1ull << CAP_SYS_RESOURCE))) {
      GTEST_SKIP() << "root here has no CAP_SYS_RESOURCE: a daemon could not keep it anyway";
    }
  }
  start();
  user_file("w", "x");
  ASSERT_EQ(as_nobody([&] {
              std::ofstream(mnt_ / "u" / "w", std::ios::app) << "written through the mount";
              return 0;
            }),
            0);
  int threads = 0;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid_) + "/task")) {
    std::ifstream in(task.path() / "status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("CapEff:", 0) != 0) continue;
      const unsigned long long eff = std::stoull(line.substr(7), nullptr, 16);
      EXPECT_FALSE(eff & (1ull << CAP_SYS_RESOURCE))
          << "thread " << task.path().filename() << " CapEff " << line.substr(7);
      ++threads;
    }
  }
  EXPECT_GT(threads, 1);
}

// The bytes of every level of the tree of `data` bytes (fs-verity's layout).
std::uint64_t tree_bytes(std::uint64_t data, std::uint64_t block, std::uint64_t digest) {
  const std::uint64_t per_block = block / digest;
  std::uint64_t blocks = (data + block - 1) / block, bytes = 0;
  while (blocks > 1) {
    blocks = (blocks + per_block - 1) / per_block;
    bytes += blocks * block;
  }
  return bytes;
}

// Opens `p` read-only as nobody and closes it: 0, or the open's errno.
int open_errno_as_nobody(const fs::path& p) {
  return as_nobody([&] {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd >= 0) ::close(fd);
    return errno_of(fd);
  });
}

// As a user may to their own verity file in SOURCE: its sidecar's descriptor rewritten to
// describe `huge` bytes (4 KiB blocks, SHA-256), both files made that long (sparse) so the
// sidecar stays consistent. 0, or a failing step.
int grow_to(const fs::path& file, std::uint64_t huge) {
  const int fd = ::open((file.string() + ".verity").c_str(), O_RDWR);
  if (fd < 0) return 1;
  std::uint8_t le[8];
  for (int i = 0; i < 8; ++i)
    le[i] = static_cast<std::uint8_t>(huge >> (8 * i));
  const bool ok = ::pwrite(fd, le, 8, 8) == 8 &&
                  ::ftruncate(fd, static_cast<off_t>(256 + tree_bytes(huge, 4096, 32))) == 0;
  ::close(fd);
  return ok && ::truncate(file.c_str(), static_cast<off_t>(huge)) == 0 ? 0 : 2;
}

// A sidecar in SOURCE is its user's: a consistent one may describe a sparse file of any
// size, and a verity file's tree is read whole at open. One describing a file one block
// over 32 GiB (a 258 MiB tree with 4 KiB blocks, sparse on disk; the kernel's format allows
// far larger) is refused at open with EFBIG, as enable refuses such a file - the daemon
// allocates nothing for it.
TEST_F(MountAttack, ASidecarImplyingATreeOverTheCapIsRefusedUnread) {
  SKIP_UNLESS_FUSE();
  user_file("big", std::string(8192, 'b'));
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (user_ / "big").string()).code,
            0);
  ASSERT_EQ(::chown((user_ / "big.verity").c_str(), 65534, 65534), 0);
  constexpr std::uint64_t huge = (std::uint64_t{32} << 30) + 4096;        // level 0: 256 MiB + 32
  ASSERT_EQ(as_nobody([&] { return grow_to(user_ / "big", huge); }), 0);  // the user's own
  start();
  // Recognised as its sidecar (hidden), so the file is a verity file, not a plain one.
  ASSERT_FALSE(fs::exists(mnt_ / "u" / "big.verity"));
  const int err = open_errno_as_nobody(mnt_ / "u" / "big");
  EXPECT_EQ(err, EFBIG) << std::strerror(err);
  EXPECT_LT(vm_hwm_kib(pid_), 128 * 1024) << "the daemon read the tree it was to refuse";
}

// The same sidecar rewritten after the mount looked the file up (a user rewrites their
// own sidecar between a stat and an open): the open is still refused before the tree is
// read - the verified_file gets the bound the looked-up descriptor was charged for.
TEST_F(MountAttack, ASidecarRewrittenAfterItsLookupIsStillBounded) {
  SKIP_UNLESS_FUSE();
  user_file("late", std::string(8192, 'l'));
  ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable " + (user_ / "late").string()).code,
            0);
  struct stat side {};
  ASSERT_EQ(::stat((user_ / "late.verity").c_str(), &side), 0);
  EXPECT_EQ(side.st_uid, quiesce::test::nobody_uid) << "root's enable kept the sidecar";
  start();
  struct stat looked {};
  ASSERT_EQ(::stat((mnt_ / "u" / "late").c_str(), &looked), 0);  // the small descriptor
  constexpr std::uint64_t huge = (std::uint64_t{32} << 30) + 4096;
  ASSERT_EQ(as_nobody([&] { return grow_to(user_ / "late", huge); }), 0);
  const int err = open_errno_as_nobody(mnt_ / "u" / "late");
  EXPECT_EQ(err, EFBIG) << std::strerror(err);
  EXPECT_LT(vm_hwm_kib(pid_), 128 * 1024) << "the daemon read the rewritten sidecar's tree";
}

// The trees of the verity files open at once are bounded (-o tree_memory_mb): past it an
// open answers ENOMEM until a file closes; a closed file's kept tree (retained.hpp) is let
// go for it. Two files of ~0.66 MiB of tree each under a 1 MiB bound.
TEST_F(MountAttack, TreesOpenAtOnceStayWithinTreeMemory) {
  SKIP_UNLESS_FUSE();
  for (const char* name : {"a", "b"}) {
    write_random(src_ / name, 20 << 20, name[0]);
    ASSERT_EQ(shell2(std::string(QUIESCE_CLI) + " verity enable --block-size 1024 " +
                     (src_ / name).string())
                  .code,
              0);
  }
  ASSERT_GT(2 * tree_bytes(20 << 20, 1024, 32), std::uint64_t{1} << 20);
  start("-o tree_memory_mb=1");
  const int a = ::open((mnt_ / "a").c_str(), O_RDONLY);
  ASSERT_GE(a, 0) << std::strerror(errno);
  char byte = 0;
  EXPECT_EQ(::pread(a, &byte, 1, 0), 1);
  EXPECT_LT(::open((mnt_ / "b").c_str(), O_RDONLY), 0) << "two trees held past the bound";
  EXPECT_EQ(errno, ENOMEM);
  ::close(a);  // its tree is kept for its next open, and let go for b's
  int b = -1;
  EXPECT_TRUE(eventually([&] { return (b = ::open((mnt_ / "b").c_str(), O_RDONLY)) >= 0; }))
      << std::strerror(errno) << ": " << daemon_log();
  if (b >= 0) {
    EXPECT_EQ(::pread(b, &byte, 1, 0), 1);
    ::close(b);
  }
}

// An enable through the mount is charged like an open: trees kept for closed files give way
// to it (before, only an open let them go, and the enable failed with ENOMEM for as long as
// the closed file's tree was kept).
TEST_F(MountAttack, AnEnableLetsTreesKeptForClosedFilesGo) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "a", 20 << 20, 'a');
  write_random(src_ / "c", 20 << 20, 'c');
  ASSERT_EQ(
      shell2(std::string(QUIESCE_CLI) + " verity enable --block-size 1024 " + (src_ / "a").string())
          .code,
      0);
  ASSERT_GT(2 * tree_bytes(20 << 20, 1024, 32), std::uint64_t{1} << 20);
  start("-o tree_memory_mb=1");
  // The kernel keeps knowing a (no FORGET lets its kept tree go meanwhile).
  const int pinned = ::open((mnt_ / "a").c_str(), O_PATH);
  ASSERT_GE(pinned, 0) << std::strerror(errno);
  const int a = ::open((mnt_ / "a").c_str(), O_RDONLY);
  ASSERT_GE(a, 0) << std::strerror(errno);
  char byte = 0;
  EXPECT_EQ(::pread(a, &byte, 1, 0), 1);
  EXPECT_EQ(enable_path(mnt_ / "c", 1024), ENOMEM) << "two trees held past the bound";
  ::close(a);  // its tree is kept (once the kernel's release arrives), and let go for c's
  int err = -1;
  EXPECT_TRUE(eventually([&] { return (err = enable_path(mnt_ / "c", 1024)) == 0; }))
      << std::strerror(err) << ": " << daemon_log();
  ::close(pinned);
}

// A FIFO named like a file's sidecar is never opened by the daemon (root), only looked at:
// before, its probe opened it for reading (O_NONBLOCK), which releases a writer blocked
// on the FIFO - and a device node under such a name would have been opened by root too.
// inotify sees every open but an O_PATH one.
TEST_F(MountAttack, TheDaemonOpensNoFifoNamedLikeASidecar) {
  SKIP_UNLESS_FUSE();
  std::ofstream(src_ / "x") << "data";
  ASSERT_EQ(::mkfifo((src_ / "x.verity").c_str(), 0644), 0);
  const int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(in, 0);
  ASSERT_GE(::inotify_add_watch(in, (src_ / "x.verity").c_str(), IN_OPEN), 0);
  start();
  struct stat st {};
  EXPECT_EQ(::stat((mnt_ / "x").c_str(), &st), 0);  // a lookup probes x.verity
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(mnt_))  // a listing probes it too
    names.push_back(e.path().filename().string());
  EXPECT_NE(std::find(names.begin(), names.end(), "x.verity"), names.end())
      << "a FIFO is not a sidecar: it is listed";
  char buf[4096];
  EXPECT_LT(::read(in, buf, sizeof buf), 0) << "the daemon opened the FIFO";
  EXPECT_EQ(errno, EAGAIN);
  ::close(in);
}

// Runs `fn` in a child as `uid` (its own group, no others); the child's exit status.
int as_user(uid_t uid, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      std::_Exit(255);
    }
    std::_Exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A sidecar the mount writes is the file's owner's: one a user enabled and then moved in
// SOURCE beside another user's file (a sticky shared directory) does not make that file a
// verity file - before, the daemon's own sidecars were accepted beside any file, and the
// victim's file became read-only to its owner.
TEST_F(MountAttack, AMovedSidecarDoesNotMakeAnotherUsersFileVerity) {
  SKIP_UNLESS_FUSE();
  constexpr uid_t victim = 1000;
  fs::create_directories(src_ / "shared");
  ::chmod((src_ / "shared").c_str(), 01777);
  std::ofstream(src_ / "shared" / "victim.txt") << "the victim's\n";
  ASSERT_EQ(::chown((src_ / "shared" / "victim.txt").c_str(), victim, victim), 0);
  ::chmod((src_ / "shared" / "victim.txt").c_str(), 0644);
  user_file("a", "the victim's\n");
  start();
  ASSERT_EQ(as_nobody([&] { return enable_path(mnt_ / "u" / "a"); }), 0);
  struct stat side {};
  ASSERT_EQ(::stat((user_ / "a.verity").c_str(), &side), 0);
  EXPECT_EQ(side.st_uid, quiesce::test::nobody_uid) << "the sidecar is not the file owner's";
  ASSERT_EQ(as_nobody([&] {
              return ::rename((user_ / "a.verity").c_str(),
                              (src_ / "shared" / "victim.txt.verity").c_str()) == 0
                         ? 0
                         : errno;
            }),
            0);
  // The victim still writes their file through the mount (the kernel may keep the old name
  // cached for the attribute timeout; a verity file would refuse with EPERM every time).
  int err = 0;
  EXPECT_TRUE(eventually(
      [&] {
        err = as_user(victim, [&] {
          const int fd = ::open((mnt_ / "shared" / "victim.txt").c_str(), O_WRONLY | O_APPEND);
          if (fd < 0) return errno;
          const bool wrote = ::write(fd, "more\n", 5) == 5;
          ::close(fd);
          return wrote ? 0 : EIO;
        });
        return err == 0;
      },
      std::chrono::seconds(5)))
      << std::strerror(err) << ": the moved sidecar made it verity";
}

// An enable whose file is renamed through the mount while its tree is built puts the
// sidecar beside the new name: none is left behind under the old one (where a file created
// later under that name would have found it), and the file is a verity file under the new.
// The rename waits until a writable open answers ETXTBSY: the build is running (the
// enable retries while such a probe holds a writer).
TEST_F(MountAttack, ARenameDuringEnableTakesTheSidecarAlong) {
  SKIP_UNLESS_FUSE();
  { std::ofstream(src_ / "e"); }
  ASSERT_EQ(::truncate((src_ / "e").c_str(), off_t{1} << 30), 0);  // sparse: a long build
  start();
  std::atomic<int> enabled{-1};
  std::thread enabler([&] {
    int r = ETXTBSY;
    while (r == ETXTBSY)
      r = enable_path(mnt_ / "e");
    enabled = r;
  });
  int seen = 0;
  const bool probed = eventually([&] {
    const int w = ::open((mnt_ / "e").c_str(), O_WRONLY);
    if (w >= 0) {
      ::close(w);  // not started yet
      return false;
    }
    seen = errno;
    return true;
  });
  if (!probed || seen != ETXTBSY) {
    enabler.join();
    GTEST_SKIP() << "the build ended before a rename could race it (" << std::strerror(seen) << ")";
  }
  const int renamed = ::rename((mnt_ / "e").c_str(), (mnt_ / "e2").c_str()) == 0 ? 0 : errno;
  enabler.join();
  ASSERT_EQ(renamed, 0) << std::strerror(renamed);
  EXPECT_EQ(enabled.load(), 0) << std::strerror(enabled.load());
  EXPECT_FALSE(fs::exists(src_ / "e.verity")) << "the sidecar was left under the old name";
  EXPECT_TRUE(fs::exists(src_ / "e2.verity"));
  const int fd = ::open((mnt_ / "e2").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  int measured = 0;
  measure(fd, measured);
  EXPECT_EQ(measured, 0) << std::strerror(measured);
  ::close(fd);
}

// ---- a daemon that dies without unmounting (auto_unmount: src/mount/auto_unmount.cpp) ----

// /proc/PID/stat's fields after the command: state, ppid, ...; empty once PID is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t end = stat.rfind(')');
  std::vector<std::string> fields;
  if (end == std::string::npos) return fields;
  std::istringstream in(stat.substr(end + 1));
  for (std::string f; in >> f;)
    fields.push_back(f);
  return fields;
}

// The processes whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto f = stat_fields(std::stoi(name));
    if (f.size() > 1 && f[1] == std::to_string(parent)) out.push_back(std::stoi(name));
  }
  return out;
}

// Whether `pid` has ended: gone, or a zombie not reaped yet.
bool has_ended(pid_t pid) {
  const auto f = stat_fields(pid);
  return f.empty() || f[0] == "Z";
}

// Whether `pid` waits in poll(2) (/proc/PID/syscall's first field).
bool waits_in_poll(pid_t pid) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/syscall"));
  std::string nr;
  in >> nr;
#ifdef SYS_poll
  if (nr == std::to_string(SYS_poll)) return true;
#endif
  return nr == std::to_string(SYS_ppoll);
}

// What each descriptor of `pid` refers to.
std::vector<std::string> descriptors_of(pid_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
    out.push_back(fs::read_symlink(e.path(), ec).string());
  return out;
}

// The auto_unmount watcher of the daemon `daemon`, once it waits for the daemon to end (or
// has ended: a watcher that does not wait); -1 if none appears.
pid_t watcher_of(pid_t daemon) {
  pid_t w = -1;
  const bool found = eventually([&] {
    const auto kids = children_of(daemon);
    if (kids.size() != 1) return false;
    w = kids[0];
    return waits_in_poll(w) || has_ended(w);
  });
  return found ? w : -1;
}

// Stops `pid` (SIGSTOP) for as long as this lives: SIGCONT on every way out.
class stopped_process {
 public:
  explicit stopped_process(pid_t pid) : pid_(pid), sent_(::kill(pid, SIGSTOP) == 0) {}
  ~stopped_process() { ::kill(pid_, SIGCONT); }
  stopped_process(const stopped_process&) = delete;
  stopped_process& operator=(const stopped_process&) = delete;
  // Whether the signal was sent.
  bool sent() const { return sent_; }
  // Whether it has stopped (state T), waited for.
  bool stopped() const {
    return eventually([&] {
      const auto f = stat_fields(pid_);
      return !f.empty() && f[0] == "T";
    });
  }

 private:
  pid_t pid_;
  bool sent_;
};

// A daemon killed outright leaves no mount: its watcher unmounts it once the daemon has
// gone. The kill comes once the watcher waits: one that looks at the mount before the
// daemon has ended (as libfuse's fusermount3 may, racing the daemon's exit) finds it alive
// and leaves it. The watcher holds none of the daemon's descriptors (/dev/fuse held would
// keep the connection alive).
TEST_F(MountAttack, AKilledDaemonLeavesNoMount) {
  SKIP_UNLESS_FUSE();
  start();
  const pid_t w = watcher_of(pid_);
  ASSERT_GT(w, 0) << "the daemon has no watcher";
  ASSERT_FALSE(has_ended(w)) << "the watcher ended before its daemon";
  // /dev/null as 0-2, the daemon's pidfd, its end of the daemon's socket and the
  // mountpoint's directory: never /dev/fuse, nor the daemon's log.
  std::vector<std::string> held = descriptors_of(w);
  for (std::string& d : held) {
    if (d.rfind("socket:", 0) == 0) d = "socket";
  }
  std::sort(held.begin(), held.end());
  std::vector<std::string> expected{"/dev/null",          "/dev/null", "/dev/null",
                                    "anon_inode:[pidfd]", "socket",    dir_.string()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(held, expected);
  // One thread (no fork handler started any), with every signal blocked.
  EXPECT_EQ(std::distance(fs::directory_iterator("/proc/" + std::to_string(w) + "/task"),
                          fs::directory_iterator()),
            1);
  std::istringstream status(slurp("/proc/" + std::to_string(w) + "/status"));
  std::uint64_t blocked = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
  }
  for (const int sig : {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1}) {
    EXPECT_TRUE(blocked & (std::uint64_t{1} << (sig - 1))) << "signal " << sig << " reaches it";
  }
  stop(SIGKILL);
  EXPECT_TRUE(eventually([&] { return !quiesce::test::is_mount_point(mnt_); }))
      << "the mount outlived its daemon";
  EXPECT_TRUE(eventually([&] { return has_ended(w); })) << "the watcher outlived its daemon";
}

// The same for a daemon serving in the background: the watcher watches the process that
// serves, not the command that returned once the mount was ready.
TEST_F(MountAttack, AKilledBackgroundDaemonLeavesNoMount) {
  SKIP_UNLESS_FUSE();
  const auto r =
      shell2(quiesce::test::mount_cli() + " verity mount " + src_.string() + " " + mnt_.string());
  ASSERT_EQ(r.code, 0) << r.out;
  // The daemon: the process of this mount that holds /dev/fuse and whose parent is not one
  // (its watcher, just forked, may hold /dev/fuse too).
  std::vector<pid_t> ours;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (slurp(e.path() / "cmdline").find(mnt_.string()) != std::string::npos) {
      ours.push_back(std::stoi(name));
    }
  }
  pid_t daemon = -1;
  for (const pid_t p : ours) {
    const auto f = stat_fields(p);
    const auto fds = descriptors_of(p);
    if (f.size() > 1 && std::find(ours.begin(), ours.end(), std::stoi(f[1])) == ours.end() &&
        std::find(fds.begin(), fds.end(), "/dev/fuse") != fds.end()) {
      daemon = p;
    }
  }
  ASSERT_GT(daemon, 0) << "no daemon serves " << mnt_;
  ASSERT_GT(watcher_of(daemon), 0) << "the daemon has no watcher";
  ::kill(daemon, SIGKILL);
  EXPECT_TRUE(eventually([&] { return !quiesce::test::is_mount_point(mnt_); }))
      << "the mount outlived its daemon";
}

// What a command traced by strace needs: LeakSanitizer cannot run under ptrace (an ASan
// build's exit would abort), so it is off there; nothing else changes.
constexpr const char* under_strace = "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" ";

// `quiesce verity mount` in the background returns only once its daemon's watcher exists:
// a daemon killed at any moment after the command returned leaves no mount. Told by the
// order of the system calls (strace -f, a ruler that does not depend on timing): the
// daemon forks its watcher, then tells the command, which then exits.
TEST_F(MountAttack, ABackgroundMountReturnsOnlyOnceItsWatcherExists) {
  SKIP_UNLESS_FUSE();
  if (shell2("command -v strace").code != 0) GTEST_SKIP() << "no strace";
  const fs::path log = dir_ / "strace.log";
  const auto started =
      shell2(std::string(under_strace) +
             "strace -f -qq -e trace=clone,clone3,fork,vfork,read,write,exit_group -o " +
             log.string() + " " + quiesce::test::mount_cli() + " verity mount " + src_.string() +
             " " + mnt_.string() + " >/dev/null 2>&1 & echo $!");
  ASSERT_EQ(started.code, 0) << started.out;
  const pid_t tracer = std::stoi(started.out);
  ASSERT_TRUE(eventually([&] { return quiesce::test::is_mount_point(mnt_); })) << "no mount";
  // The command's process: the first in the log. Its exit_group ends the command.
  struct line {
    pid_t pid;
    std::string text;
  };
  auto lines = [&log] {
    std::vector<line> out;
    std::istringstream in(slurp(log));
    for (std::string l; std::getline(in, l);) {
      const std::size_t sp = l.find(' ');
      if (sp == std::string::npos || l.find_first_not_of("0123456789") != sp) continue;
      // (strace pads the pid to five columns.)
      const std::size_t text = l.find_first_not_of(' ', sp);
      if (text == std::string::npos) continue;
      out.push_back({std::stoi(l.substr(0, sp)), l.substr(text)});
    }
    return out;
  };
  ASSERT_TRUE(eventually([&] {
    const auto ls = lines();
    return !ls.empty() && std::any_of(ls.begin(), ls.end(), [&](const line& l) {
      return l.pid == ls.front().pid && l.text.rfind("exit_group(", 0) == 0;
    });
  })) << "the command did not return:\n"
      << slurp(log);
  ASSERT_EQ(shell2("fusermount3 -u " + mnt_.string()).code, 0);
  ASSERT_TRUE(eventually([&] { return ::kill(tracer, 0) != 0 || has_ended(tracer); }))
      << "the daemon did not end after the unmount";
  const auto ls = lines();
  const pid_t command = ls.front().pid;
  // A process's fork: clone() (threads come from clone3()), maybe split by strace into an
  // "<unfinished ...>" entry and a "<... clone resumed>" line that has the result.
  auto fork_entry = [](const line& l) {
    return (l.text.rfind("clone(", 0) == 0 || l.text.rfind("fork(", 0) == 0) &&
           l.text.find("CLONE_THREAD") == std::string::npos;  // (clone3 may be missing)
  };
  auto fork_result = [](const line& l) -> pid_t {
    if (l.text.rfind("clone(", 0) != 0 && l.text.rfind("fork(", 0) != 0 &&
        l.text.rfind("<... clone resumed>", 0) != 0 && l.text.rfind("<... fork resumed>", 0) != 0)
      return -1;
    const std::size_t eq = l.text.rfind(") = ");
    if (eq == std::string::npos) return -1;
    const std::string n = l.text.substr(eq + 4);
    return !n.empty() && n.find_first_not_of("0123456789") == std::string::npos ? std::stoi(n) : -1;
  };
  pid_t daemon = -1;
  for (const line& l : ls)
    if (l.pid == command && daemon < 0) daemon = fork_result(l);
  std::ptrdiff_t watcher_at = -1, ready_at = -1, heard_at = -1, exit_at = -1;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const line& l = ls[i];
    const auto at = static_cast<std::ptrdiff_t>(i);
    if (l.pid == daemon && fork_entry(l) && watcher_at < 0) {
      watcher_at = at;
    } else if (l.pid == daemon && l.text.rfind("write(", 0) == 0 &&
               l.text.find(", \"R\", 1") != std::string::npos && ready_at < 0) {
      ready_at = at;
    } else if (l.pid == command &&
               (l.text.rfind("read(", 0) == 0 || l.text.rfind("<... read resumed>", 0) == 0) &&
               l.text.find("\"R\", 1)") != std::string::npos && l.text.ends_with("= 1") &&
               heard_at < 0) {
      heard_at = at;  // the command read the daemon's word
    } else if (l.pid == command && l.text.rfind("exit_group(0)", 0) == 0) {
      exit_at = at;
    }
  }
  SCOPED_TRACE(slurp(log));
  ASSERT_GT(daemon, 0) << "the command forked no daemon";
  ASSERT_GE(watcher_at, 0) << "the daemon forked no watcher";
  ASSERT_GE(ready_at, 0) << "the daemon never said it was ready";
  ASSERT_GE(heard_at, 0) << "the command never read the daemon's word";
  ASSERT_GE(exit_at, 0) << "the command did not exit 0";
  EXPECT_LT(watcher_at, ready_at) << "the daemon said it was ready before its watcher existed";
  EXPECT_LT(ready_at, heard_at);
  EXPECT_LT(heard_at, exit_at) << "the command returned before it heard its daemon was ready";
}

// A background daemon that ends before it serves - killed, or failing in its setup - leaves
// no mount, and the command fails saying so (libfuse's fuse_daemonize returned 0 and left a
// dead mount when its child was killed there): killed before its watcher exists, the
// command takes the dead mount away; after, the watcher does (never both: the second would
// detach whatever lies below). strace injects the ends.
TEST_F(MountAttack, ADaemonEndingBeforeItServesLeavesNoMountAndTheCommandFails) {
  SKIP_UNLESS_FUSE();
  if (shell2("command -v strace").code != 0) GTEST_SKIP() << "no strace";
  const std::string mount =
      quiesce::test::mount_cli() + " verity mount " + src_.string() + " " + mnt_.string() + " 2>&1";
  // Into the daemon's setsid(), its first system call of its own (before its watcher
  // exists), then its first dup2() (/dev/null onto its standard streams just before its last
  // word: after the watcher; no other process of the command, sanitizer runtimes included,
  // calls dup2).
  for (const auto& [inject, says] :
       {std::pair{"setsid:signal=SIGKILL", "the daemon was killed before it served: unmounted"},
        std::pair{"setsid:error=EPERM", "cannot daemonize: Operation not permitted"},
        std::pair{"dup2:signal=SIGKILL",
                  "the daemon was killed before it served (its watcher unmounts)"}}) {
    SCOPED_TRACE(inject);
    const std::string call(inject, std::string_view(inject).find(':'));
    const auto r =
        shell2(std::string(under_strace) + "strace -f -qq -o /dev/null -e trace=" + call +
               " -e inject=" + inject + " " + mount);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("failed to unmount"), std::string::npos) << r.out;
    EXPECT_TRUE(eventually([&] { return !quiesce::test::is_mount_point(mnt_); }))
        << "a mount outlived its daemon";
    if (quiesce::test::is_mount_point(mnt_)) shell2("umount -l " + mnt_.string());
  }
}

// The watcher unmounts the mountpoint it was given, not a path walked again: a directory
// above the mountpoint renamed and replaced by a symlink (what a user who owns one can do)
// to a place where another dead mount lies leaves that one alone.
TEST_F(MountAttack, AWatcherUnmountsItsMountNotWhereASymlinkPoints) {
  SKIP_UNLESS_FUSE();
  const fs::path decoy = dir_ / "decoy" / "mnt", up = dir_ / "up", moved = dir_ / "up-moved";
  fs::create_directories(decoy);
  fs::create_directories(up / "mnt");
  struct cleanup {
    std::vector<fs::path> points;
    ~cleanup() {
      for (const fs::path& p : points)
        if (quiesce::test::is_mount_point(p)) shell2("umount -l " + p.string());
    }
  } unmount{{decoy, moved / "mnt", up / "mnt"}};
  mnt_ = decoy;  // a dead mount where the symlink will point
  start("-o noauto_unmount");
  stop(SIGKILL);
  ASSERT_TRUE(quiesce::test::is_mount_point(decoy));
  mnt_ = up / "mnt";
  start();
  const pid_t w = watcher_of(pid_);
  ASSERT_GT(w, 0) << "the daemon has no watcher";
  const stopped_process paused(w);
  ASSERT_TRUE(paused.sent());
  ASSERT_TRUE(paused.stopped());
  stop(SIGKILL);
  ASSERT_EQ(::rename(up.c_str(), moved.c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink(decoy.parent_path().c_str(), up.c_str()), 0) << std::strerror(errno);
  mnt_ = moved / "mnt";
  ::kill(w, SIGCONT);
  EXPECT_TRUE(eventually([&] { return has_ended(w); })) << "the watcher outlived its daemon";
  EXPECT_FALSE(quiesce::test::is_mount_point(moved / "mnt")) << "its own mount stayed";
  EXPECT_TRUE(quiesce::test::is_mount_point(decoy)) << "it unmounted where the symlink pointed";
}

// A mount served in a process that goes on once serve() has returned (a library user's, the
// mount bench's): its watcher ends with the serving, not with the process.
TEST_F(MountAttack, AWatcherEndsWhenServingEndsInAProcessThatGoesOn) {
  SKIP_UNLESS_FUSE();
  ASSERT_TRUE(children_of(::getpid()).empty()) << "this test counts this process's children";
  quiesce::mount::verity_mount_options o;
  o.handle_signals = false;
  quiesce::mount::verity_mount m(src_, mnt_, o);
  std::thread server([&] { m.serve(); });
  EXPECT_TRUE(eventually([&] { return children_of(::getpid()).size() == 1; })) << "no watcher";
  m.unmount();
  server.join();
  EXPECT_FALSE(quiesce::test::is_mount_point(mnt_));
  EXPECT_TRUE(eventually([&] {
    int status = 0;
    while (::waitpid(-1, &status, WNOHANG) > 0) {  // reaped: this process goes on
    }
    return children_of(::getpid()).empty();
  })) << "the watcher outlived the serving";
}

// -o noauto_unmount: no watcher, and a daemon killed outright leaves its mount (answering
// ENOTCONN) to whoever unmounts it.
TEST_F(MountAttack, NoautoUnmountLeavesAKilledDaemonsMount) {
  SKIP_UNLESS_FUSE();
  { std::ofstream(src_ / "f") << "f"; }
  start("-o noauto_unmount");
  EXPECT_EQ(slurp(mnt_ / "f"), "f");  // serving: a watcher would have been started by now
  EXPECT_TRUE(children_of(pid_).empty());
  stop(SIGKILL);
  EXPECT_TRUE(quiesce::test::is_mount_point(mnt_));
  struct statx stx {};  // (forced: the root's attributes may be cached)
  EXPECT_NE(::statx(AT_FDCWD, mnt_.c_str(), AT_STATX_FORCE_SYNC, STATX_TYPE, &stx), 0);
  EXPECT_EQ(errno, ENOTCONN) << std::strerror(errno);
}

// A daemon that unmounted and ended cleanly: its watcher leaves alone what is mounted at
// the mountpoint by the time it looks (a tmpfs here: the watcher is stopped meanwhile).
TEST_F(MountAttack, TheWatcherOfACleanExitLeavesTheNextMountAlone) {
  SKIP_UNLESS_FUSE();
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  start();
  const pid_t w = watcher_of(pid_);
  ASSERT_GT(w, 0) << "the daemon has no watcher";
  const stopped_process paused(w);
  ASSERT_TRUE(paused.sent());
  // Stopped before the daemon ends: it sees the daemon's end and its byte together.
  ASSERT_TRUE(paused.stopped());
  const int status = stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_FALSE(quiesce::test::is_mount_point(mnt_));
  ASSERT_EQ(shell2("mount -t tmpfs quiesce-next " + mnt_.string()).code, 0);
  ::kill(w, SIGCONT);
  EXPECT_TRUE(eventually([&] { return has_ended(w); })) << "the watcher outlived its daemon";
  EXPECT_TRUE(quiesce::test::is_mount_point(mnt_)) << "the watcher unmounted the next mount";
  shell2("umount " + mnt_.string());
}

}  // namespace
