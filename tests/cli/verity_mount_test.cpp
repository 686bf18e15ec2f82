// SPDX-License-Identifier: Apache-2.0
// quiesce verity mount through the kernel: unmodified fsverity-utils (measure, enable,
// sign), lsattr and plain reads on a real FUSE mount. Root with /dev/fuse (as on these
// machines); skipped with the reason otherwise. Every wait is on a condition.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <linux/fsverity.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mount_fixture.hpp"

namespace {

namespace fs = std::filesystem;

using result = quiesce::test::shell_result;
using quiesce::test::slurp;
using quiesce::test::write_random;

result shell(const std::string& cmd) {
  return quiesce::test::shell2(cmd);
}

bool is_mounted(const fs::path& dir) {
  return quiesce::test::is_mount_point(dir);
}

class VerityMount : public quiesce::test::MountFixture {};

// `fsverity measure` on the mount is `fsverity digest` of the source and `quiesce verity
// digest`, for sizes, both algorithms, block sizes and salts; the bytes read are the file's.
TEST_F(VerityMount, MeasureIsTheDigestOfEveryParameterSet) {
  SKIP_UNLESS_FUSE();
  // Per parameter set, one file of each size; the digest and measure commands take them
  // all at once (one line per file, in order), so each set costs one process of each.
  struct parameter_set {
    std::string options;  // fsverity-utils' spelling, accepted by quiesce verity enable too
    std::vector<std::string> files;
  };
  std::vector<parameter_set> sets;
  int n = 0;
  for (const char* alg : {"sha256", "sha512"}) {
    for (const char* bs : {"1024", "4096", "65536"}) {
      for (const char* salt : {"", "--salt 00ab12"}) {
        parameter_set set{std::string("--hash-alg ") + alg + " --block-size " + bs + " " + salt,
                          {}};
        for (std::size_t size : {std::size_t{1}, std::size_t{4096}, std::size_t{100'000},
                                 std::size_t{(1 << 20) + 7}}) {
          const std::string name = "f" + std::to_string(n++);
          write_random(src_ / name, size, static_cast<unsigned>(n));
          const result en = shell(std::string(QUIESCE_CLI) + " verity enable " +
                                  (src_ / name).string() + " " + set.options);
          ASSERT_EQ(en.code, 0) << en.out;
          set.files.push_back(name);
        }
        sets.push_back(std::move(set));
      }
    }
  }
  start();
  // The first word of each line of `out`.
  auto first_words = [](const std::string& out) {
    std::vector<std::string> words;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      words.push_back(line.substr(0, line.find(' ')));
    return words;
  };
  for (const parameter_set& set : sets) {
    std::string in_mount, in_source;
    for (const std::string& name : set.files) {
      in_mount += " " + (mnt_ / name).string();
      in_source += " " + (src_ / name).string();
    }
    const result measured = shell("fsverity measure" + in_mount);
    const result digest = shell("fsverity digest" + in_source + " " + set.options);
    const result ours =
        shell(std::string(QUIESCE_CLI) + " verity digest" + in_source + " " + set.options);
    ASSERT_EQ(measured.code, 0) << set.options << ": " << measured.out;
    ASSERT_EQ(digest.code, 0) << digest.out;
    ASSERT_EQ(ours.code, 0) << ours.out;
    const std::vector<std::string> want = first_words(digest.out);
    ASSERT_EQ(want.size(), set.files.size()) << digest.out;
    EXPECT_EQ(first_words(measured.out), want) << set.options;
    EXPECT_EQ(first_words(ours.out), want) << set.options;
    for (const std::string& name : set.files)
      EXPECT_TRUE(slurp(mnt_ / name) == slurp(src_ / name)) << name << ": the bytes differ";
  }
}

// What a user sees: sidecars hidden, lsattr's V, a verity file not writable, a plain file
// read and written as it is, `fsverity measure` of a plain file ENODATA, dump_metadata
// refused as documented.
TEST_F(VerityMount, ListingsFlagsAndPlainFiles) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "v", 50'000, 1);
  write_random(src_ / "plain", 3000, 2);
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "v").string()).code, 0);
  start();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(mnt_))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"plain", "v"}));
  EXPECT_FALSE(fs::exists(mnt_ / "v.verity"));
  EXPECT_EQ(fs::file_size(mnt_ / "v"), 50'000u);
  const result attrs = shell("lsattr " + (mnt_ / "v").string() + " " + (mnt_ / "plain").string());
  ASSERT_EQ(attrs.code, 0) << attrs.out;
  std::istringstream lines(attrs.out);
  std::string v_line, plain_line;
  std::getline(lines, v_line);
  std::getline(lines, plain_line);
  EXPECT_NE(v_line.substr(0, v_line.find(' ')).find('V'), std::string::npos) << attrs.out;
  EXPECT_EQ(plain_line.substr(0, plain_line.find(' ')).find('V'), std::string::npos) << attrs.out;
  errno = 0;
  EXPECT_LT(::open((mnt_ / "v").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_LT(::open((mnt_ / "v").c_str(), O_RDONLY | O_TRUNC), 0);
  EXPECT_EQ(errno, EPERM);
  const result plain_measure = shell("fsverity measure " + (mnt_ / "plain").string());
  EXPECT_NE(plain_measure.code, 0);
  EXPECT_NE(plain_measure.out.find("No data available"), std::string::npos) << plain_measure.out;
  std::ofstream(mnt_ / "plain", std::ios::app) << "more";
  EXPECT_EQ(fs::file_size(src_ / "plain"), 3004u);
  std::ofstream(mnt_ / "new") << "fresh";
  EXPECT_EQ(slurp(src_ / "new"), "fresh");
  const result dump = shell("fsverity dump_metadata descriptor " + (mnt_ / "v").string());
  EXPECT_NE(dump.code, 0);
  EXPECT_NE(dump.out.find("not supported"), std::string::npos) << dump.out;
}

// `fsverity enable` on the mount with its options, then `fsverity measure`; enabling again
// is EEXIST; the file is then a verity file for every open.
TEST_F(VerityMount, FsverityEnableThroughTheMount) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "e", 200'000, 3);
  start();
  const std::string opts = "--hash-alg=sha512 --block-size=1024 --salt=deadbeef";
  const result en = shell("fsverity enable " + (mnt_ / "e").string() + " " + opts);
  ASSERT_EQ(en.code, 0) << en.out << daemon_log();
  EXPECT_TRUE(fs::exists(src_ / "e.verity"));
  EXPECT_FALSE(fs::exists(src_ / "e.verity.pending"));
  const result measured = shell("fsverity measure " + (mnt_ / "e").string());
  const result digest = shell("fsverity digest " + (src_ / "e").string() + " " + opts);
  EXPECT_EQ(measured.out.substr(0, measured.out.find(' ')),
            digest.out.substr(0, digest.out.find(' ')));
  const result again = shell("fsverity enable " + (mnt_ / "e").string());
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.out.find("File exists"), std::string::npos) << again.out;
  EXPECT_EQ(
      shell("lsattr " + (mnt_ / "e").string()).out.substr(0, 22).find('V') != std::string::npos,
      true);
  EXPECT_TRUE(slurp(mnt_ / "e") == slurp(src_ / "e")) << "the bytes differ";
}

#if defined(__x86_64__)
// ioctl(2) as a 32-bit process makes it (the i386 system call entry, int $0x80, which a
// 64-bit process may use where the kernel emulates i386): the kernel takes its compat_ioctl
// path, and FUSE sends FUSE_IOCTL_COMPAT. `arg` must lie below 4 GiB. Returns the system
// call's result (-errno on failure).
long ioctl32(int fd, unsigned cmd, void* arg) {
  long ret = 0;
  const auto low = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(arg));
  __asm__ volatile("int $0x80"
                   : "=a"(ret)
                   : "a"(54 /* i386 __NR_ioctl */), "b"(fd), "c"(cmd), "d"(low)
                   : "memory");
  return ret;
}

// Whether this kernel runs i386 system calls (ia32_emulation): a child tries one (it may
// die of it where the kernel does not).
bool ia32_syscalls_work() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    void* low = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    const int fd = ::open("/", O_RDONLY | O_DIRECTORY);
    std::_Exit(low != MAP_FAILED && ioctl32(fd, FS_IOC32_GETFLAGS, low) != -ENOSYS ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A 32-bit program (32-bit lsattr or fsverity) gets the answers a 64-bit one gets: the kernel's
// compat_ioctl rules - FS_IOC32_GETFLAGS is FS_IOC_GETFLAGS with an int, and the verity
// ioctls have the same numbers - where the mount once answered ENOSYS to all of them. (On
// kernels 5.13+ the kernel answers a 32-bit GETFLAGS through FUSE's fileattr request
// itself: MEASURE and ENABLE are what reach the daemon as FUSE_IOCTL_COMPAT here.)
TEST_F(VerityMount, A32BitCallerGetsWhatA64BitOneGets) {
  SKIP_UNLESS_FUSE();
  if (!ia32_syscalls_work()) GTEST_SKIP() << "this kernel does not run i386 system calls";
  write_random(src_ / "v", 50'000, 4);
  write_random(src_ / "plain", 3000, 5);
  write_random(src_ / "e", 20'000, 6);
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "v").string()).code, 0);
  start();
  auto* low = static_cast<std::uint8_t*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0));
  ASSERT_NE(low, MAP_FAILED);
  for (const char* name : {"v", "plain"}) {
    const int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << name;
    int flags64 = 0;
    ASSERT_EQ(::ioctl(fd, FS_IOC_GETFLAGS, &flags64), 0) << name;
    std::memset(low, 0, 8);
    EXPECT_EQ(ioctl32(fd, FS_IOC32_GETFLAGS, low), 0) << name << daemon_log();
    int flags32 = 0;
    std::memcpy(&flags32, low, sizeof flags32);
    EXPECT_EQ(flags32, flags64) << name;
    EXPECT_EQ((flags32 & FS_VERITY_FL) != 0, std::string(name) == "v") << name;
    // What neither answers: ENOTTY for both (FS_IOC32_SETFLAGS and FS_IOC_SETFLAGS).
    errno = 0;
    EXPECT_EQ(::ioctl(fd, FS_IOC_SETFLAGS, &flags64), -1);
    EXPECT_EQ(ioctl32(fd, FS_IOC32_SETFLAGS, low), -errno) << name;
    // MEASURE: the same digest, or the same refusal (ENODATA on a plain file).
    auto* d32 = reinterpret_cast<fsverity_digest*>(low);
    d32->digest_size = 64;
    const long measured32 = ioctl32(fd, FS_IOC_MEASURE_VERITY, low);
    alignas(8) std::uint8_t buf64[sizeof(fsverity_digest) + 64] = {};
    auto* d64 = reinterpret_cast<fsverity_digest*>(buf64);
    d64->digest_size = 64;
    errno = 0;
    const int measured64 = ::ioctl(fd, FS_IOC_MEASURE_VERITY, d64);
    EXPECT_EQ(measured32, measured64 == 0 ? 0 : -errno) << name;
    if (measured64 == 0) {
      EXPECT_EQ(d32->digest_algorithm, d64->digest_algorithm);
      ASSERT_EQ(d32->digest_size, d64->digest_size);
      EXPECT_EQ(std::memcmp(d32->digest, d64->digest, d64->digest_size), 0) << name;
    }
    ::close(fd);
  }
  // ENABLE with a salt the kernel reads through a 32-bit pointer.
  const int fd = ::open((mnt_ / "e").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  auto* arg = reinterpret_cast<fsverity_enable_arg*>(low);
  std::memset(low, 0, 4096);
  std::uint8_t* salt = low + 1024;
  std::memcpy(salt, "\xde\xad\xbe\xef", 4);
  arg->version = 1;
  arg->hash_algorithm = FS_VERITY_HASH_ALG_SHA256;
  arg->block_size = 4096;
  arg->salt_size = 4;
  arg->salt_ptr = reinterpret_cast<std::uintptr_t>(salt);
  EXPECT_EQ(ioctl32(fd, FS_IOC_ENABLE_VERITY, low), 0) << daemon_log();
  ::close(fd);
  const result measured = shell("fsverity measure " + (mnt_ / "e").string());
  const result digest = shell("fsverity digest " + (src_ / "e").string() + " --salt=deadbeef");
  EXPECT_EQ(measured.out.substr(0, measured.out.find(' ')),
            digest.out.substr(0, digest.out.find(' ')));
  ::munmap(low, 4096);
}
#endif

// A tampered block: no read returns a byte of it - a read starting in it fails with EIO,
// one that starts before it ends before it - and the daemon logs it, naming the file and
// block; reads elsewhere return the right bytes.
TEST_F(VerityMount, ATamperedBlockFailsOnlyTheReadsThatCoverIt) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "t", 1 << 20, 4);
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "t").string()).code, 0);
  const std::string good = slurp(src_ / "t");
  {
    std::fstream io(src_ / "t", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(100 * 4096 + 123);
    io.put(static_cast<char>(good[100 * 4096 + 123] ^ 0x40));
  }
  start();
  const int fd = ::open((mnt_ / "t").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<char> buf(8 * 4096);
  // A read of blocks 96..103 returns at most the verified blocks before 100 (the kernel
  // ends a read at the first page that failed, as with a kernel fs-verity file), never a
  // byte of block 100 or beyond.
  const ssize_t before_bad = ::pread(fd, buf.data(), buf.size(), 96 * 4096);
  EXPECT_LE(before_bad, 4 * 4096) << "bytes of block 100 or beyond were returned";
  if (before_bad > 0) {
    EXPECT_TRUE(std::string(buf.data(), static_cast<std::size_t>(before_bad)) ==
                good.substr(96 * 4096, static_cast<std::size_t>(before_bad)))
        << "the bytes before block 100 differ";
  } else {
    EXPECT_EQ(errno, EIO);
  }
  errno = 0;
  EXPECT_EQ(::pread(fd, buf.data(), buf.size(), 100 * 4096), -1) << "a read of block 100 returned";
  EXPECT_EQ(errno, EIO);
  errno = 0;
  EXPECT_EQ(::pread(fd, buf.data(), 10, 100 * 4096 + 5), -1);
  EXPECT_EQ(errno, EIO);
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()));
  EXPECT_TRUE(std::string(buf.data(), buf.size()) == good.substr(0, buf.size())) << "blocks 0-7";
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 200 * 4096), static_cast<ssize_t>(buf.size()));
  EXPECT_TRUE(std::string(buf.data(), buf.size()) == good.substr(200 * 4096, buf.size()))
      << "blocks 200-207";
  ::close(fd);
  EXPECT_NE(shell("cat " + (mnt_ / "t").string() + " >/dev/null").code, 0);
  ASSERT_TRUE(quiesce::test::eventually([&] {
    return daemon_log().find("block 100 failed fs-verity verification") != std::string::npos;
  })) << daemon_log();
  EXPECT_NE(daemon_log().find("FILE CORRUPTED"), std::string::npos);
}

// --stats FILE: the counters appear while the mount serves (per file verified reads and
// bytes, EIO replies, plain reads, queue->start percentiles) and the final ones at its end.
TEST_F(VerityMount, StatsFileCountsVerifiedReadsAndEioWhileServing) {
  SKIP_UNLESS_FUSE();
  fs::create_directories(src_ / "sub");
  write_random(src_ / "sub" / "t", 1 << 20, 4);
  write_random(src_ / "plain", 8192, 5);
  ASSERT_EQ(
      shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "sub" / "t").string()).code, 0);
  {
    std::fstream io(src_ / "sub" / "t", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(100 * 4096);
    io.put('\x55');
    io.put('\xaa');
  }
  const fs::path stats = dir_ / "stats.json";
  start("--stats " + stats.string());
  const auto counts = [&] {
    std::ifstream in(stats);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  };
  const int fd = ::open((mnt_ / "sub" / "t").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<char> buf(64 * 1024);
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()));
  EXPECT_EQ(::pread(fd, buf.data(), 4096, 100 * 4096), -1);
  ::close(fd);
  EXPECT_EQ(slurp(mnt_ / "plain").size(), 8192u);
  // Written every second while serving: wait for the counts (a generous deadline).
  ASSERT_TRUE(quiesce::test::eventually([&] {
    const nlohmann::json j = counts();
    return j.value("eio", 0) >= 1 && j.value("verified_bytes", 0) >= 64 * 1024 &&
           j.value("plain_reads", 0) >= 1;
  })) << counts().dump(2)
      << daemon_log();
  EXPECT_EQ(stop(), 0) << daemon_log();
  const nlohmann::json j = counts();
  ASSERT_EQ(j["files"].size(), 1u) << j.dump(2);  // the plain file has no verified reads
  const nlohmann::json& t = j["files"][0];
  EXPECT_EQ(t["path"], "sub/t");
  EXPECT_GE(t["verified_reads"].get<int>(), 1);
  EXPECT_GE(t["verified_bytes"].get<std::uint64_t>(), 64u * 1024);
  EXPECT_EQ(t["eio"], j["eio"]);
  EXPECT_EQ(j["queue"], "fsverity_read_queue");
  EXPECT_GE(j["queue_to_start_us"]["count"].get<int>(), 2);
  EXPECT_GE(j["queue_to_start_us"]["p99"].get<double>(),
            j["queue_to_start_us"]["p50"].get<double>());
  // A directory that does not exist is refused before anything is mounted.
  EXPECT_EQ(shell(std::string(QUIESCE_CLI) + " verity mount " + src_.string() + " " +
                  mnt_.string() + " --stats " + (dir_ / "nowhere" / "s.json").string())
                .code,
            2);
}

// Several processes read random ranges of two tampered files (a data byte flipped in one, a
// tree byte in the other's sidecar): every read returns exactly the original bytes, or
// fails with EIO - never other bytes.
TEST_F(VerityMount, RandomReadsOfTamperedFilesReturnTheSourceBytesOrEio) {
  SKIP_UNLESS_FUSE();
  write_random(src_ / "d", 2 << 20, 21);
  write_random(src_ / "t", 2 << 20, 22);
  for (const char* f : {"d", "t"})
    ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / f).string()).code, 0);
  const std::string good_d = slurp(src_ / "d"), good_t = slurp(src_ / "t");
  {
    std::fstream io(src_ / "d", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(300 * 4096 + 9);
    io.put(static_cast<char>(good_d[300 * 4096 + 9] ^ 1));
  }
  {
    const std::string side = slurp(src_ / "t.verity");
    std::fstream io(src_ / "t.verity", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(256 + 1000);  // a hash in the tree's first block
    io.put(static_cast<char>(side[256 + 1000] ^ 0x80));
  }
  start();
  constexpr int nr_procs = 3, nr_reads = 300;
  const std::string path_d = (mnt_ / "d").string(), path_t = (mnt_ / "t").string();
  std::vector<char> buf(256 * 1024);  // the children's, allocated before fork
  std::vector<pid_t> pids;
  for (int p = 0; p < nr_procs; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // only system calls and the copies made before fork
      std::uint64_t x = static_cast<std::uint64_t>(p) * 7919 + 3;
      int eio = 0, bad = 0;
      for (int r = 0; r < nr_reads; ++r) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const bool first = x % 2 == 0;
        const std::string& good = first ? good_d : good_t;
        const int fd = ::open((first ? path_d : path_t).c_str(), O_RDONLY);
        if (fd < 0) std::_Exit(3);
        const std::size_t len = 1 + (x >> 8) % buf.size();
        const std::size_t off = (x >> 24) % good.size();
        const ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
        ::close(fd);
        if (n < 0) {
          if (errno != EIO) std::_Exit(4);
          ++eio;
          continue;
        }
        if (std::memcmp(buf.data(), good.data() + off, static_cast<std::size_t>(n)) != 0) ++bad;
      }
      std::_Exit(bad > 0 ? 1 : (eio > 0 ? 0 : 2));
    }
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_NE(WEXITSTATUS(status), 1) << "a read returned bytes that are not the source's";
    EXPECT_NE(WEXITSTATUS(status), 3) << "an open failed";
    EXPECT_NE(WEXITSTATUS(status), 4) << "a read failed with another error than EIO";
    EXPECT_NE(WEXITSTATUS(status), 2) << "no read met a tampered block (the test saw nothing)";
  }
  // The sidecar's tree byte: reading the whole file fails.
  EXPECT_NE(shell("cat " + (mnt_ / "t").string() + " >/dev/null").code, 0);
}

// Built-in signatures as the kernel's fs.verity.require_signatures: `fsverity sign` makes
// one, `fsverity enable --signature` passes it through the mount; enabling unsigned, or
// with another key's signature, is refused, and an unsigned verity file cannot be opened.
TEST_F(VerityMount, RequiredSignaturesFromFsveritySign) {
  SKIP_UNLESS_FUSE();
  for (const char* name : {"trusted", "other"}) {
    const std::string k = (dir_ / name).string();
    ASSERT_EQ(shell("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=mnt-" +
                    std::string(name) + " -keyout " + k + ".key -out " + k + ".pem")
                  .code,
              0);
  }
  write_random(src_ / "s", 70'000, 5);
  write_random(src_ / "u", 70'000, 6);
  write_random(src_ / "w", 70'000, 7);
  write_random(src_ / "old", 70'000, 8);
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "old").string()).code, 0);
  const auto sign = [&](const std::string& file, const char* key) {
    const std::string k = (dir_ / key).string();
    return shell("fsverity sign " + (src_ / file).string() + " " + (dir_ / file).string() +
                 ".sig --key=" + k + ".key --cert=" + k + ".pem");
  };
  ASSERT_EQ(sign("s", "trusted").code, 0);
  ASSERT_EQ(sign("w", "other").code, 0);
  start("--require-signatures --cert " + (dir_ / "trusted.pem").string());
  const result ok = shell("fsverity enable " + (mnt_ / "s").string() +
                          " --signature=" + (dir_ / "s.sig").string());
  EXPECT_EQ(ok.code, 0) << ok.out << daemon_log();
  EXPECT_TRUE(slurp(mnt_ / "s") == slurp(src_ / "s")) << "the bytes differ";
  const result unsigned_enable = shell("fsverity enable " + (mnt_ / "u").string());
  EXPECT_NE(unsigned_enable.code, 0);
  EXPECT_NE(unsigned_enable.out.find("Operation not permitted"), std::string::npos)
      << unsigned_enable.out;
  EXPECT_FALSE(fs::exists(src_ / "u.verity"));
  const result wrong = shell("fsverity enable " + (mnt_ / "w").string() +
                             " --signature=" + (dir_ / "w.sig").string());
  EXPECT_NE(wrong.code, 0) << wrong.out;
  EXPECT_FALSE(fs::exists(src_ / "w.verity"));
  EXPECT_FALSE(fs::exists(src_ / "w.verity.pending"));
  errno = 0;
  EXPECT_LT(::open((mnt_ / "old").c_str(), O_RDONLY), 0) << "an unsigned verity file opened";
  EXPECT_EQ(errno, EPERM);
  // Signed by another key in the source (enabled there, not through the mount): not opened.
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "w").string() +
                  " --signature " + (dir_ / "w.sig").string())
                .code,
            0);
  errno = 0;
  EXPECT_LT(::open((mnt_ / "w").c_str(), O_RDONLY), 0) << "a file signed by another key opened";
  EXPECT_EQ(errno, ENOKEY);
}

// Lifecycle: SIGINT and SIGTERM unmount and end the daemon (no stale mount), and the
// caller's mistakes are one line, exit 2, before anything is mounted.
TEST_F(VerityMount, SignalsUnmountAndMistakesAreExit2) {
  SKIP_UNLESS_FUSE();
  for (int sig : {SIGINT, SIGTERM}) {
    start();
    const int status = stop(sig);
    // libfuse's handler ends the session: a clean exit (under ASan, no leak either).
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << daemon_log();
    EXPECT_FALSE(is_mounted(mnt_)) << "signal " << sig << " left the mount";
    EXPECT_TRUE(fs::is_empty(mnt_));
  }
  std::ofstream(dir_ / "file") << "x";
  const std::string cli = std::string(QUIESCE_CLI) + " verity mount ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {(dir_ / "file").string() + " " + mnt_.string(), "not a directory"},
           {src_.string() + " " + (dir_ / "nowhere").string(), "no such directory"},
           {src_.string() + " " + src_.string(), "cannot be the source"},
           {src_.string() + " " + mnt_.string() + " --require-signatures", "no trusted"}}) {
    const result r = shell(cli + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_FALSE(is_mounted(mnt_));
  }
  std::ofstream(src_ / "x") << "x";
  fs::create_directories(mnt_ / "busy");
  const result nonempty = shell(cli + src_.string() + " " + mnt_.string());
  EXPECT_EQ(nonempty.code, 2) << nonempty.out;
  EXPECT_NE(nonempty.out.find("not empty"), std::string::npos) << nonempty.out;
}

// Like sshfs: the command returns once the mount is ready and a child serves it; the
// first listing right after it sees the files.
TEST_F(VerityMount, ReturnsOnceMountedAndServesInTheBackground) {
  SKIP_UNLESS_FUSE();
  std::ofstream(src_ / "a") << "a";
  for (int i = 0; i < 3; ++i) {
    const result r = shell(quiesce::test::mount_cli() + " verity mount " + src_.string() + " " +
                           mnt_.string() + " && ls " + mnt_.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(r.out == "a\n" || r.out.ends_with("\na\n")) << "try " << i << ": " << r.out;
    EXPECT_TRUE(is_mounted(mnt_));
    EXPECT_EQ(shell("fusermount3 -u " + mnt_.string()).code, 0);
    // The daemon ends with its mount.
    EXPECT_TRUE(quiesce::test::eventually([&] {
      // (the bracket keeps pgrep's own shell from matching)
      return shell("pgrep -f 'verity moun[t] " + src_.string() + " '").code != 0;
    })) << "the daemon outlived its mount";
  }
}

// mount(8) through mount.fuse3 and the helper (what an fstab line does): options as mount
// passes them - ro (EROFS, enable too), noatime, cert=, what fstab adds - and umount(8).
TEST_F(VerityMount, MountsThroughMountFuse3WithOptions) {
  SKIP_UNLESS_FUSE();
  if (shell("test -x /sbin/mount.fuse3 || test -x /usr/sbin/mount.fuse3").code != 0) {
    GTEST_SKIP() << "mount.fuse3 is not installed";
  }
  const std::string helper = fs::path(quiesce::test::mount_cli()).parent_path() / "quiesce-verity";
  ASSERT_TRUE(fs::exists(helper)) << helper;
  write_random(src_ / "v", 20'000, 1);
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "v").string()).code, 0);
  std::ofstream(src_ / "p") << "plain";
  const result m = shell("mount -t fuse '" + helper + "#" + src_.string() + "' " + mnt_.string() +
                         " -o ro,noatime,nosuid,nodev,noauto,_netdev,x-systemd.automount");
  ASSERT_EQ(m.code, 0) << m.out;
  ASSERT_TRUE(is_mounted(mnt_));
  const std::string line = shell("grep ' " + mnt_.string() + " ' /proc/mounts").out;
  EXPECT_NE(line.find("fuse.quiesce-verity"), std::string::npos) << line;
  EXPECT_NE(line.find("ro,"), std::string::npos) << line;
  EXPECT_NE(line.find("noatime"), std::string::npos) << line;
  EXPECT_EQ(slurp(mnt_ / "p"), "plain");
  EXPECT_EQ(slurp(mnt_ / "v"), slurp(src_ / "v"));
  EXPECT_LT(::open((mnt_ / "p").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EROFS);
  const result enable = shell("fsverity enable " + (mnt_ / "p").string());
  EXPECT_NE(enable.out.find("Read-only file system"), std::string::npos) << enable.out;
  EXPECT_EQ(shell("umount " + mnt_.string()).code, 0);
  EXPECT_FALSE(is_mounted(mnt_));
}

// The mount's readahead window (its bdi's read_ahead_kb): 4 MiB by default, -o
// read_ahead_kb=N, 0 leaves the kernel's; both ends of the range accepted.
TEST_F(VerityMount, ReadaheadIsTheOptionsWindow) {
  SKIP_UNLESS_FUSE();
  if (::geteuid() != 0) GTEST_SKIP() << "only root may set a bdi's readahead";
  std::ofstream(src_ / "p") << "plain";
  const auto window = [&] {
    struct stat st {};
    if (::stat((mnt_ / "p").c_str(), &st) != 0) return std::string("no file");
    return slurp("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                 std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
  };
  for (const auto& [args, kb] :
       std::vector<std::pair<std::string, std::string>>{{"", "4096\n"},
                                                        {"-o read_ahead_kb=512", "512\n"},
                                                        {"-o read_ahead_kb=1048576", "1048576\n"},
                                                        {"-o read_ahead_kb=0", "128\n"}}) {
    start(args);
    EXPECT_EQ(window(), kb) << args;
    EXPECT_EQ(slurp(mnt_ / "p"), "plain") << args;
    stop();
    ASSERT_TRUE(quiesce::test::eventually([&] { return !is_mounted(mnt_); })) << args;
  }
}

// -o tree_memory_mb=N: both ends of its range mount and serve a verity file (what the bound
// does: MountAttack.TreesOpenAtOnceStayWithinTreeMemory).
TEST_F(VerityMount, TreeMemoryAcceptsBothEndsOfItsRange) {
  SKIP_UNLESS_FUSE();
  std::ofstream(src_ / "v") << std::string(100'000, 'v');
  ASSERT_EQ(shell(std::string(QUIESCE_CLI) + " verity enable " + (src_ / "v").string()).code, 0);
  for (const std::string args : {"-o tree_memory_mb=1", "-o tree_memory_mb=1048576"}) {
    start(args);
    EXPECT_EQ(slurp(mnt_ / "v"), std::string(100'000, 'v')) << args;
    stop();
    ASSERT_TRUE(quiesce::test::eventually([&] { return !is_mounted(mnt_); })) << args;
  }
}

// -o mistakes are one line and exit 2, before anything is mounted; a user who is not root
// may not open the mount to others unless /etc/fuse.conf says so.
TEST_F(VerityMount, OptionMistakesAreExit2) {
  SKIP_UNLESS_FUSE();
  const std::string cli =
      quiesce::test::mount_cli() + " verity mount " + src_.string() + " " + mnt_.string();
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"-o ro,bogus", "-o bogus: not an option"},
           {"-o cert=", "no file named"},
           {"-o require_signatures", "no trusted certificate"},
           {"-o cert=/nonexistent.pem", "/nonexistent.pem"},
           {"-o read_ahead_kb=", "not a whole number of KiB in 0..1048576"},
           {"-o read_ahead_kb=-1", "not a whole number of KiB in 0..1048576"},
           {"-o read_ahead_kb=1048577", "not a whole number of KiB in 0..1048576"},
           {"-o read_ahead_kb=4k", "not a whole number of KiB in 0..1048576"},
           {"-o tree_memory_mb=", "not a whole number of MiB in 1..1048576"},
           {"-o tree_memory_mb=0", "not a whole number of MiB in 1..1048576"},
           {"-o tree_memory_mb=1048577", "not a whole number of MiB in 1..1048576"},
           {"-o tree_memory_mb=1g", "not a whole number of MiB in 1..1048576"}}) {
    const result r = shell(cli + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_FALSE(is_mounted(mnt_)) << args;
  }
  if (shell("grep -q '^user_allow_other' /etc/fuse.conf").code != 0) {
    ::chown(mnt_.c_str(), 65534, 65534);
    const result r =
        shell("setpriv --reuid=65534 --regid=65534 --clear-groups " + cli + " -o allow_other");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("user_allow_other"), std::string::npos) << r.out;
  }
}

// A user mounts a directory of their own (through the setuid fusermount3): they read their
// file through it, another user may not enter it, and they unmount it. Debian's /dev/fuse is
// mode 0666; where this machine's is root's alone (a container's 0600), the test runs in a
// private mount namespace of its own whose /dev/fuse is a 0666 node of the same device, so
// the host's device keeps its mode and the user's path - libfuse opening /dev/fuse, its
// mount(2) refused, fusermount3 mounting for it - is taken whatever the host's mode.
TEST_F(VerityMount, AUserMountsTheirOwnDirectory) {
  SKIP_UNLESS_FUSE();
  ::chown(src_.c_str(), 65534, 65534);
  ::chown(mnt_.c_str(), 65534, 65534);
  std::ofstream(src_ / "mine") << "mine";
  ::chown((src_ / "mine").c_str(), 65534, 65534);
  const std::string user = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  const std::string other = "setpriv --reuid=65533 --regid=65533 --clear-groups ";
  const std::string mnt = mnt_.string();
  // The build may lie where that user cannot go (a checkout under /root).
  if (shell(user + "test -x " + quiesce::test::mount_cli()).code != 0)
    GTEST_SKIP() << "user 65534 cannot run " << quiesce::test::mount_cli();
  const std::string script =
      "set -u\n"
      "d=" +
      (dir_ / "dev").string() +
      "\n"
      "mkdir \"$d\" || exit 89\n"
      "mount -t tmpfs -o mode=0755 none \"$d\" || exit 90\n"
      "mknod -m 0666 \"$d/fuse\" c 0x$(stat -c %t /dev/fuse) 0x$(stat -c %T /dev/fuse) || exit 91\n"
      "mount --bind \"$d/fuse\" /dev/fuse || exit 92\n" +
      user + quiesce::test::mount_cli() + " verity mount " + src_.string() + " " + mnt +
      " || exit 93\n"
      "echo \"read: $(" +
      user + "cat " + mnt + "/mine)\"\n" + other + "cat " + mnt +
      "/mine >/dev/null 2>&1 && echo 'other: read' || echo 'other: refused'\n" + user +
      "fusermount3 -u " + mnt + " && echo unmounted\n";
  const fs::path script_file = dir_ / "user_mount.sh";
  std::ofstream(script_file) << script;
  const result r = shell("unshare --mount --propagation private sh " + script_file.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("read: mine\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("other: refused\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unmounted\n"), std::string::npos) << r.out;
  EXPECT_FALSE(is_mounted(mnt_)) << "the user's mount showed outside its namespace";
}

}  // namespace

namespace {

// Mounts of the bench's temporary mountpoints (TMP/quiesce-verity-mnt-*) still in place.
// Only under this test's own TMP: a mount another test left behind is not this one's.
std::vector<std::string> bench_mounts(const fs::path& tmp) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::vector<std::string> points;
  const std::string prefix = (tmp / "quiesce-verity-mnt-").string();
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    if (f >> id >> parent >> dev >> root >> point && point.rfind(prefix, 0) == 0)
      points.push_back(point);
  }
  return points;
}

// Lazily unmounts what a failed run left under `tmp`, so that it does not outlive the test.
void unmount_leftovers(const fs::path& tmp) {
  for (const auto& point : bench_mounts(tmp))
    quiesce::test::run_shell("fusermount3 -u -z " + point + " 2>&1");
}

// A bench test's TMPDIR, removed (what a failed run mounted there unmounted first) however
// the test ends.
struct bench_tmp {
  explicit bench_tmp(const std::string& name)
      : path(fs::temp_directory_path() / (name + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~bench_tmp() {
    unmount_leftovers(path);
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  bench_tmp(const bench_tmp&) = delete;
  bench_tmp& operator=(const bench_tmp&) = delete;
  const fs::path path;
};

int bench_dirs(const fs::path& tmp) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(tmp))
    n += e.path().filename().string().rfind("quiesce-verity-", 0) == 0;
  return n;
}

// The seed's experiment through the mount: both queues measured in every run (the apps'
// reads, the verification items, the cold start), nothing left behind.
TEST(VerityMountBench, MeasuresBothQueuesAndLeavesNothing) {
  SKIP_UNLESS_FUSE();
  const bench_tmp scratch("quiesce-mb-");
  const fs::path& tmp = scratch.path;
  // stdout alone: the JSON (shell() would add stderr).
  const result r =
      quiesce::test::run_shell("TMPDIR=" + tmp.string() + " " + std::string(QUIESCE_CLI) +
                               " verity bench --mount --app-mib 4 --seq-mib 8 --apps 2 --runs 2 "
                               "--json 2>" +
                               (tmp / "stderr").string());
  const std::string err = quiesce::test::slurp(tmp / "stderr");
  ASSERT_EQ(r.code, 0) << r.out << err;
  // A clean run says nothing on stderr (libfuse's "fuse: failed to unmount" once did).
  EXPECT_EQ(err, "");
  fs::remove(tmp / "stderr");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["runs"], 2);
  EXPECT_GT(j["files"].get<int>(), 2);
  for (const char* side : {"bound", "unbound"}) {
    EXPECT_GT(j[side]["read_latency_us"]["n"].get<double>(), 0) << side;
    EXPECT_GT(j[side]["queue_to_start_us"]["n"].get<double>(), 0)
        << side << ": no verification item ran - the reads were not verified";
    EXPECT_EQ(j[side]["cold_start_ms"]["runs"].size(), 2u) << side;
    for (const auto& ms : j[side]["cold_start_ms"]["runs"])
      EXPECT_GT(ms.get<double>(), 0) << side;
  }
  EXPECT_EQ(j["bound"]["queue"], "fsverity_read_queue");
  EXPECT_EQ(j["unbound"]["queue"], "fsverity_read_queue_unbound");
  // The baseline: the same files without sidecars, read by the same apps, nothing queued.
  EXPECT_GT(j["plain"]["read_latency_us"]["n"].get<double>(), 0);
  EXPECT_EQ(j["plain"]["queue_to_start_us"]["n"].get<double>(), 0)
      << "a file without a sidecar went through verification";
  EXPECT_EQ(j["plain"]["cold_start_ms"]["runs"].size(), 2u);
  // The sequential row: each way read cold and warm in every run, and the two ratios.
  const auto& seq = j["sequential"];
  EXPECT_EQ(seq["mib"], 8);
  for (const char* way : {"direct", "fuse", "verified"}) {
    for (const char* when : {"cold_ms", "warm_ms"}) {
      ASSERT_EQ(seq[way][when]["runs"].size(), 2u) << way << " " << when;
      for (const auto& ms : seq[way][when]["runs"])
        EXPECT_GT(ms.get<double>(), 0) << way << " " << when;
    }
  }
  EXPECT_NEAR(seq["verified_cold_vs_fuse"].get<double>(),
              seq["fuse"]["cold_ms"]["median"].get<double>() /
                  seq["verified"]["cold_ms"]["median"].get<double>(),
              1e-9);
  EXPECT_NEAR(seq["verified_warm_vs_direct"].get<double>(),
              seq["direct"]["warm_ms"]["median"].get<double>() /
                  seq["verified"]["warm_ms"]["median"].get<double>(),
              1e-9);
  EXPECT_EQ(bench_mounts(tmp).size(), 0u);
  EXPECT_EQ(bench_dirs(tmp), 0);
}

TEST(VerityMountBench, InterruptedLeavesNoMountNorFiles) {
  SKIP_UNLESS_FUSE();
  const bench_tmp scratch("quiesce-mbi-");
  const fs::path& tmp = scratch.path;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("TMPDIR", tmp.c_str(), 1);
    ::execl(QUIESCE_CLI, QUIESCE_CLI, "verity", "bench", "--mount", "--app-mib", "64", "--runs",
            "50", "--json", nullptr);
    std::_Exit(127);
  }
  ASSERT_TRUE(quiesce::test::eventually([&] { return !bench_mounts(tmp).empty(); }))
      << "the bench never mounted";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_TRUE(quiesce::test::eventually([&] { return bench_mounts(tmp).empty(); }))
      << "a mount was left behind";
  EXPECT_EQ(bench_dirs(tmp), 0) << "files were left behind in " << tmp;
}

}  // namespace
