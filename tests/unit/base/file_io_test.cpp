// SPDX-License-Identifier: Apache-2.0
// write_file_atomically and write_output_file (quiesce/file_io.hpp): the whole file or the
// old one, never a planted file or symlink followed, no temporary left behind on failure; a
// stream the user names as an output written in place, never replaced.
#include "../../../src/base/file_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class FileIo : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiesce-file-io-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  fs::path dir_;
};

TEST_F(FileIo, WritesThePartsAndReplacesTheOldFile) {
  const fs::path f = dir_ / "out";
  quiesce::write_file_atomically(f, {"hello ", "world"});
  EXPECT_EQ(read_all(f), "hello world");
  quiesce::write_file_atomically(f, {"second"});
  EXPECT_EQ(read_all(f), "second");
  EXPECT_EQ(entries(), 1u);  // no temporary left
}

TEST_F(FileIo, ASymlinkAtThePathIsReplacedNotFollowed) {
  const fs::path target = dir_ / "victim";
  { std::ofstream(target) << "precious"; }
  const fs::path f = dir_ / "out";
  fs::create_symlink(target, f);
  quiesce::write_file_atomically(f, {"new"});
  EXPECT_EQ(read_all(target), "precious");
  EXPECT_FALSE(fs::is_symlink(f));
  EXPECT_EQ(read_all(f), "new");
}

TEST_F(FileIo, AFailureLeavesThePathAsItWasAndNoTemporary) {
  const fs::path d = dir_ / "a-directory";
  fs::create_directories(d / "inside");
  try {
    quiesce::write_file_atomically(d, {"x"});  // rename over a non-empty directory fails
    ADD_FAILURE() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(d.string()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(d / "inside"));
  EXPECT_EQ(entries(), 1u);  // only the directory: the temporary was removed

  const fs::path missing = dir_ / "no-such-dir" / "out";
  EXPECT_THROW(quiesce::write_file_atomically(missing, {"x"}), std::system_error);
  EXPECT_FALSE(fs::exists(missing));
}

}  // namespace

namespace {

TEST_F(FileIo, ReadFileReadsProcFilesAndRefusesBeyondTheLimit) {
  // /proc files report size 0: read until end of file.
  const std::string stat = quiesce::read_file("/proc/self/stat");
  EXPECT_NE(stat.find(std::to_string(::getpid())), std::string::npos);
  const fs::path f = dir_ / "f";
  quiesce::write_file_atomically(f, {std::string(100'000, 'x')});
  EXPECT_EQ(quiesce::read_file(f).size(), 100'000u);
  EXPECT_THROW(quiesce::read_file(f, 99'999), std::system_error);
  try {
    quiesce::read_file(dir_ / "missing");
    ADD_FAILURE() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// What the FIFO whose read end is `fd` (opened O_NONBLOCK) holds now.
std::string drain_fifo(int fd) {
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  return got;
}

// An output the user names may be a stream: a FIFO, directly or through a symlink, gets the
// bytes and stays a FIFO (a rename would have put a regular file in its place). Its read end
// is open (non-blocking) before the write, so the writer's open does not wait, and a write
// that went elsewhere leaves it empty.
TEST_F(FileIo, AnOutputThatNamesAFifoIsWrittenInPlace) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const fs::path link = dir_ / "link";
  fs::create_symlink(fifo, link);
  for (const fs::path& path : {fifo, link}) {
    const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(rd, 0) << std::strerror(errno);
    quiesce::write_output_file(path, {"tree ", "bytes"});
    EXPECT_EQ(drain_fifo(rd), "tree bytes") << path;
    ::close(rd);
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << "the FIFO was replaced";
  }
  EXPECT_TRUE(fs::is_symlink(link)) << "the symlink to the FIFO was replaced";
  EXPECT_EQ(entries(), 2u);  // no temporary left
}

// A character device (root only: a node of /dev/null's own device, made here, so that a
// regression replaces this one and not the machine's) is written in place and stays one.
TEST_F(FileIo, AnOutputThatNamesADeviceIsWrittenInPlace) {
  struct stat null_st {};
  ASSERT_EQ(::stat("/dev/null", &null_st), 0);
  const fs::path dev = dir_ / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, null_st.st_rdev) != 0)
    GTEST_SKIP() << "cannot make a device node here: " << std::strerror(errno);
  quiesce::write_output_file(dev, {"descriptor"});
  struct stat st {};
  ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced by a regular file";
  EXPECT_EQ(st.st_rdev, null_st.st_rdev);
}

// Files beside other users' (sidecars) never open what is at the path: a FIFO there is
// replaced, not written into (a planted one would otherwise hold the writer, and a planted
// symlink to a device would be followed).
TEST_F(FileIo, AnAtomicWriteReplacesAFifoAndNeverOpensIt) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  quiesce::write_file_atomically(fifo, {"sidecar"});  // no reader: an open would block
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(fifo)));
  EXPECT_EQ(read_all(fifo), "sidecar");
}

// A regular file at an output path is replaced atomically, as by write_file_atomically.
TEST_F(FileIo, AnOutputThatNamesARegularFileIsReplacedAtomically) {
  const fs::path f = dir_ / "out";
  { std::ofstream(f) << "old and longer"; }
  const fs::path link = dir_ / "link";
  fs::create_symlink(f, link);
  quiesce::write_output_file(link, {"new"});
  EXPECT_EQ(read_all(f), "old and longer") << "a symlink to a regular file was followed";
  EXPECT_EQ(read_all(link), "new");
  EXPECT_FALSE(fs::is_symlink(link));
}

}  // namespace
