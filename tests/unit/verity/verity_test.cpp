// fs-verity digests against the oracle, fsverity-utils' `fsverity digest` (Debian package
// fsverity, installed by ./quiesce), on generated files.
#include "quiesce/verity.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

#include "quiesce/workqueue.hpp"

namespace quiesce::verity {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  return out;
}

std::vector<std::uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class VerityOracle : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::system("fsverity --version > /dev/null 2>&1"), 0)
        << "the oracle `fsverity` is missing: ./quiesce installs Debian's fsverity package";
    dir_ = fs::temp_directory_path() / ("quiesce-verity-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path make_file(std::size_t size, unsigned seed) {
    const fs::path path = dir_ / ("f" + std::to_string(size) + "_" + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<char> data(size);
    for (auto& c : data) c = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
    return path;
  }

  // Compares digest, tree and descriptor with the oracle's.
  void check(const fs::path& file, const params& p, workqueue* wq = nullptr) {
    const merkle_tree t = build_tree(file, p, wq);
    std::string args = fmt("--hash-alg=%s --block-size=%zu", to_string(p.alg), p.block_size);
    if (!p.salt.empty()) args += " --salt=" + to_hex(p.salt);
    const fs::path tree = dir_ / "tree", desc = dir_ / "desc";
    const std::string out = run("fsverity digest '" + file.string() + "' " + args +
                                " --out-merkle-tree=" + tree.string() +
                                " --out-descriptor=" + desc.string());
    const std::string ours = std::string(to_string(p.alg)) + ":" + to_hex(file_digest(t)) + " " +
                             file.string() + "\n";
    EXPECT_EQ(ours, out) << args << " size " << t.data_size;
    EXPECT_EQ(t.tree, read_all(tree)) << args;
    const auto d = descriptor(t);
    EXPECT_EQ(std::vector<std::uint8_t>(d.begin(), d.end()), read_all(desc)) << args;
    const std::string sig = run("fsverity digest '" + file.string() + "' " + args +
                                " --for-builtin-sig");
    EXPECT_EQ(to_hex(builtin_sig_message(t)) + " " + file.string() + "\n", sig) << args;
  }

  template <typename... A>
  static std::string fmt(const char* f, A... a) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a...);
    return buf;
  }

  fs::path dir_;
};

TEST_F(VerityOracle, EdgeSizesEveryAlgorithmBlockSizeAndSalt) {
  const std::vector<std::size_t> sizes = {0, 1, 4095, 4096, 4097, 65536, 1 << 20, (1 << 20) + 1,
                                          3 * 4096 * 128 + 7};
  for (std::size_t size : sizes) {
    const fs::path f = make_file(size, static_cast<unsigned>(size));
    for (hash_alg alg : {hash_alg::sha256, hash_alg::sha512}) {
      for (std::size_t bs : {std::size_t{1024}, std::size_t{4096}, std::size_t{65536}}) {
        for (const std::vector<std::uint8_t>& salt :
             {std::vector<std::uint8_t>{}, std::vector<std::uint8_t>{0xab},
              std::vector<std::uint8_t>(32, 0x5c)}) {
          params p;
          p.alg = alg;
          p.block_size = bs;
          p.salt = salt;
          check(f, p);
        }
      }
    }
  }
}

TEST_F(VerityOracle, SmallestBlockSizesAndMultiLevelTrees) {
  const fs::path f = make_file(200'000, 9);
  check(f, params{hash_alg::sha256, 64, {}});   // 2 hashes per block: a deep tree
  check(f, params{hash_alg::sha512, 128, {1, 2, 3}});
}

TEST_F(VerityOracle, ParallelLevelZeroOnAWorkqueueIsTheSame) {
  const fs::path f = make_file((9 << 20) + 123, 4);  // > 8 MiB: split into work items
  workqueue wq("verity-test", wq_options{.unbound = true});
  check(f, params{}, &wq);
  check(f, params{hash_alg::sha512, 4096, {7}}, &wq);
}

TEST(Verity, KnownDigestsFromTheReference) {
  params p;
  EXPECT_EQ(to_hex(file_digest(build_tree(nullptr, 0, p))),
            "3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af95");
  const std::vector<std::uint8_t> a4096(4096, 'a'), a4097(4097, 'a');
  EXPECT_EQ(to_hex(file_digest(build_tree(a4096.data(), a4096.size(), p))),
            "a2a808ddaced77f0b6b3068f47b14b5a1fb3fc43674993ab11b8e7e6f2d089e2");
  const merkle_tree t = build_tree(a4097.data(), a4097.size(), p);
  EXPECT_EQ(to_hex(file_digest(t)),
            "18b155c0b6e054f3f7d22488ed15340e74dc161ce2d123e13eb685c3ce565f70");
  EXPECT_EQ(t.tree.size(), 4096u);
  const std::vector<std::uint8_t> mib(1 << 20, 0);
  EXPECT_EQ(build_tree(mib.data(), mib.size(), p).tree.size(), 12288u);
}

TEST(Verity, BadParametersAreRejectedNamingThem) {
  auto msg = [](params p) {
    try {
      p.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({hash_alg::sha256, 3000, {}}).find("block-size"), std::string::npos);
  EXPECT_NE(msg({hash_alg::sha512, 64, {}}).find("block-size"), std::string::npos);
  EXPECT_NE(msg({hash_alg::sha256, 4096, std::vector<std::uint8_t>(33)}).find("salt"),
            std::string::npos);
  EXPECT_THROW(parse_hash_alg("md5"), std::invalid_argument);
  EXPECT_THROW(from_hex("abc"), std::invalid_argument);
  EXPECT_THROW(from_hex("zz"), std::invalid_argument);
  EXPECT_EQ(from_hex("00ff"), (std::vector<std::uint8_t>{0, 255}));
  EXPECT_THROW(build_tree("/nonexistent/file", params{}), std::system_error);
}

}  // namespace
}  // namespace quiesce::verity
