// SPDX-License-Identifier: Apache-2.0
// write_file_atomically (quiesce/file_io.hpp): the whole file or the old one, never a
// planted file or symlink followed, no temporary left behind on failure.
#include "../../../src/base/file_io.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

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
