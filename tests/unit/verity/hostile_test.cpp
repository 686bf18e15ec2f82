// SPDX-License-Identifier: Apache-2.0
// Hostile files: FIFOs, devices, /proc files, huge sparse sidecars, and descriptors whose
// padding, reserved bytes or sig_size are wrong. Each is refused at open, without blocking
// and without reading more than the descriptor.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "verity_test_util.hpp"

namespace quiesce::verity::test {
namespace {

class Hostile : public scratch_dir {
 protected:
  int open_error(const fs::path& file, std::optional<fs::path> sidecar = {},
                 std::string* what = nullptr) {
    return error_of([&] { verified_file(file, wq_, trust_policy::integrity(), sidecar); }, what);
  }
  workqueue wq_{"verity_hostile_test"};
};

// Opening a FIFO for reading waits for a writer: as the file or as its sidecar it must be
// refused at once (the test would hang on a blocking open).
TEST_F(Hostile, FifosAreRefusedWithoutBlocking) {
  const fs::path f = write("f", random_bytes(10'000, 1));
  enable(f, params{});
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string what;
  EXPECT_EQ(open_error(f, fifo, &what), EINVAL);
  EXPECT_NE(what.find("a FIFO"), std::string::npos) << what;
  fs::copy_file(f.string() + ".verity", fifo.string() + ".verity");
  EXPECT_EQ(open_error(fifo), EINVAL);
  EXPECT_EQ(error_of([&] { build_tree(fifo, params{}); }), EINVAL);
  EXPECT_EQ(error_of([&] { enable(fifo, params{}); }), EINVAL);
}

// A /proc file is "regular" with size 0 and reads as anything: refused as file and sidecar.
TEST_F(Hostile, ProcFilesAreRefused) {
  const fs::path empty = write("empty", {});
  enable(empty, params{});
  const fs::path status = "/proc/self/status";
  std::string what;
  EXPECT_EQ(open_error(status, empty.string() + ".verity", &what), EINVAL);
  EXPECT_NE(what.find("procfs"), std::string::npos) << what;
  EXPECT_EQ(error_of([&] { build_tree(status, params{}); }), EINVAL);
  EXPECT_EQ(error_of([&] { enable(status, params{}, dir_ / "status.verity"); }), EINVAL);
  EXPECT_FALSE(fs::exists(dir_ / "status.verity"));
  EXPECT_EQ(open_error(empty, status), EINVAL);
  // Through a symlink too: what counts is what it names.
  fs::create_symlink(status, dir_ / "link");
  EXPECT_EQ(open_error(dir_ / "link", empty.string() + ".verity"), EINVAL);
}

// A sidecar symlinked to /dev/zero (endless) or to a directory is refused before any read.
TEST_F(Hostile, DevicesAndDirectoriesAreRefused) {
  const fs::path f = write("f", random_bytes(10'000, 2));
  fs::create_symlink("/dev/zero", f.string() + ".verity");
  std::string what;
  EXPECT_EQ(open_error(f, {}, &what), EINVAL);
  EXPECT_NE(what.find("character device"), std::string::npos) << what;
  EXPECT_EQ(open_error(f, dir_), EISDIR);
  EXPECT_EQ(open_error("/dev/zero", f.string() + ".verity"), EINVAL);
  EXPECT_EQ(error_of([&] { build_tree("/dev/zero", params{}); }), EINVAL);
}

long max_rss_kib() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A 512 MiB sparse sidecar behind a valid descriptor: rejected by its size, nothing of it
// read (the process's peak memory does not grow by anything like it).
TEST_F(Hostile, AHugeSparseSidecarIsRejectedWithoutReadingIt) {
  const fs::path f = write("f", random_bytes(100'000, 3));
  enable(f, params{});
  const fs::path side = f.string() + ".verity";
  fs::resize_file(side, std::uintmax_t{512} << 20);
  const long before = max_rss_kib();
  std::string what;
  EXPECT_EQ(open_error(f, {}, &what), EINVAL);
  EXPECT_NE(what.find("the descriptor implies"), std::string::npos) << what;
  EXPECT_LT(max_rss_kib() - before, 64 * 1024) << "the sidecar was read into memory";
  // A sparse data file whose size matches a garbage descriptor: the descriptor is refused.
  write("g.verity", std::vector<std::uint8_t>(256, 0xff));
  fs::resize_file(dir_ / "g.verity", std::uintmax_t{512} << 20);
  EXPECT_EQ(open_error(f, dir_ / "g.verity"), EINVAL);
  EXPECT_LT(max_rss_kib() - before, 64 * 1024);
}

// Reserved and padding bytes must be zero, sig_size consistent; each bad sidecar is
// refused with EINVAL naming what is wrong.
TEST_F(Hostile, DescriptorHygiene) {
  const fs::path f = write("f", random_bytes(100'000, 4));
  enable(f, params{hash_alg::sha256, 4096, {1, 2}});
  const fs::path side = f.string() + ".verity";
  const auto good = read_all(side);
  struct bad_case {
    std::size_t at;
    std::uint8_t value;
    const char* says;
  };
  for (const bad_case& c :
       {bad_case{200, 1, "reserved"}, bad_case{112, 0x80, "reserved"}, bad_case{255, 1, "reserved"},
        bad_case{16 + 32, 1, "root hash padding"}, bad_case{79, 1, "root hash padding"},
        bad_case{80 + 2, 1, "salt padding"}, bad_case{111, 1, "salt padding"},
        bad_case{4, 1, "bytes, the descriptor"}, bad_case{6, 1, "sig_size"},
        bad_case{0, 2, "version"}, bad_case{1, 3, "algorithm"}}) {
    auto bytes = good;
    bytes[c.at] = c.value;
    write("f.verity", bytes);
    std::string what;
    EXPECT_EQ(open_error(f, {}, &what), EINVAL) << "byte " << c.at;
    EXPECT_NE(what.find(c.says), std::string::npos) << "byte " << c.at << ": " << what;
  }
  // One byte extra or missing at the end.
  auto longer = good;
  longer.push_back(0);
  write("f.verity", longer);
  EXPECT_EQ(open_error(f), EINVAL);
  write("f.verity", std::vector<std::uint8_t>(good.begin(), good.end() - 1));
  EXPECT_EQ(open_error(f), EINVAL);
  write("f.verity", good);
  EXPECT_EQ(open_error(f), 0);
}

}  // namespace
}  // namespace quiesce::verity::test
