// SPDX-License-Identifier: Apache-2.0
// fs-verity digests against the oracle, fsverity-utils' `fsverity digest` (Debian package
// fsverity, installed by ./quiesce), on generated files.
#include "quiesce/verity.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "quiesce/workqueue.hpp"

namespace quiesce::verity {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p))
    out += buf;
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
    for (auto& c : data)
      c = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
    return path;
  }

  // Compares digest, tree and descriptor with the oracle's.
  void check(const fs::path& file, const params& p, workqueue* wq = nullptr) {
    const merkle_tree t = build_tree(file, p, wq);
    std::string args = fmt("--hash-alg=%s --block-size=%zu", to_string(p.alg), p.block_size);
    if (!p.salt.empty()) args += " --salt=" + to_hex(p.salt);
    const fs::path tree = dir_ / "tree", desc = dir_ / "desc";
    const std::string out =
        run("fsverity digest '" + file.string() + "' " + args +
            " --out-merkle-tree=" + tree.string() + " --out-descriptor=" + desc.string());
    const std::string ours =
        std::string(to_string(p.alg)) + ":" + to_hex(file_digest(t)) + " " + file.string() + "\n";
    EXPECT_EQ(ours, out) << args << " size " << t.data_size;
    EXPECT_EQ(t.tree, read_all(tree)) << args;
    const auto d = descriptor(t);
    EXPECT_EQ(std::vector<std::uint8_t>(d.begin(), d.end()), read_all(desc)) << args;
    const std::string sig =
        run("fsverity digest '" + file.string() + "' " + args + " --for-builtin-sig");
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
  const std::vector<std::size_t> sizes = {
      0, 1, 4095, 4096, 4097, 65536, 1 << 20, (1 << 20) + 1, 3 * 4096 * 128 + 7};
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
  check(f, params{hash_alg::sha256, 64, {}});  // 2 hashes per block: a deep tree
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
  // fs-verity's algorithm numbers are 1 and 2; a block size must fit its u32 fields.
  EXPECT_NE(msg({static_cast<hash_alg>(0), 4096, {}}).find("hash-alg: 0"), std::string::npos);
  EXPECT_NE(msg({static_cast<hash_alg>(3), 4096, {}}).find("hash-alg: 3"), std::string::npos);
  EXPECT_NE(msg({hash_alg::sha256, max_block_size * 2, {}}).find("block-size"), std::string::npos);
  EXPECT_EQ(msg({hash_alg::sha256, max_block_size, {}}), "");
  EXPECT_EQ(parse_hash_alg("1"), hash_alg::sha256);
  EXPECT_EQ(parse_hash_alg("2"), hash_alg::sha512);
  EXPECT_THROW(parse_hash_alg("3"), std::invalid_argument);
  EXPECT_THROW(parse_hash_alg("md5"), std::invalid_argument);
  EXPECT_THROW(from_hex("abc"), std::invalid_argument);
  EXPECT_THROW(from_hex("zz"), std::invalid_argument);
  EXPECT_EQ(from_hex("00ff"), (std::vector<std::uint8_t>{0, 255}));
  EXPECT_THROW(build_tree("/nonexistent/file", params{}), std::system_error);
}

}  // namespace
}  // namespace quiesce::verity

namespace quiesce::verity {
namespace {

// Trusts exactly the digest of `t` (as a caller who ran enable() itself would).
trust_policy pin(const merkle_tree& t) {
  return trust_policy::pinned({t.p.alg, file_digest(t)});
}

class VerifiedReads : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiesce-vread-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path make(std::size_t size, unsigned seed) {
    data_.resize(size);
    std::mt19937 rng(seed);
    for (auto& c : data_)
      c = static_cast<std::uint8_t>(rng());
    const fs::path p = dir_ / ("file" + std::to_string(seed));
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(data_.data()), static_cast<std::streamsize>(size));
    return p;
  }
  void corrupt(const fs::path& p, std::uint64_t at) {
    std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ 0x40));
  }
  fs::path dir_;
  std::vector<std::uint8_t> data_;
};

TEST_F(VerifiedReads, ReadsReturnTheFileAndUseTheTreeBitmap) {
  workqueue wq("fsverity_read_queue", wq_options{.highpri = true});
  for (const params& p : {params{}, params{hash_alg::sha512, 1024, {1, 2, 3}}}) {
    const fs::path f = make(3 * 1024 * 1024 + 777, 11);
    const merkle_tree t = enable(f, p);
    verified_file v(f, wq, pin(t));
    EXPECT_EQ(v.digest(), file_digest(t));
    std::vector<std::uint8_t> out(data_.size());
    for (std::uint64_t off = 0; off < data_.size(); off += 65536) {
      const auto n = v.read(
          off, std::span(out).subspan(off, std::min<std::size_t>(65536, data_.size() - off)));
      EXPECT_GT(n, 0u);
    }
    EXPECT_EQ(out, data_);
    // Odd offsets and lengths, and a read past the end.
    std::vector<std::uint8_t> small(5000);
    EXPECT_EQ(v.read(12345, small), 5000u);
    EXPECT_TRUE(std::equal(small.begin(), small.end(), data_.begin() + 12345));
    EXPECT_EQ(v.read(data_.size() - 10, small), 10u);
    EXPECT_EQ(v.read(data_.size() + 1, small), 0u);
    const read_stats s = v.stats();
    EXPECT_GT(s.hash_block_hits, 0u);  // sequential reads mostly stop at a verified block
    EXPECT_EQ(s.failures, 0u);
    // Every block read was hashed once per read that covered it: the whole file, then the
    // blocks under [12345, 17345), then the last block.
    const std::uint64_t bs = p.block_size;
    const std::uint64_t whole = (data_.size() + bs - 1) / bs;
    const std::uint64_t odd = (12345 + 5000 - 1) / bs - 12345 / bs + 1;
    EXPECT_EQ(s.blocks_verified, whole + odd + 1);
    EXPECT_GT(s.verify_ns, 0u);  // the workers' time is accounted
  }
  EXPECT_GT(wq.stats().executed, 0u);  // verification ran on the queue
}

TEST_F(VerifiedReads, ACorruptBlockFailsWithEioNamingItAndOthersStillRead) {
  workqueue wq("vq");
  const fs::path f = make(1 << 20, 12);
  const merkle_tree t = enable(f, params{});
  corrupt(f, 5 * 4096 + 100);  // block 5
  verified_file v(f, wq, pin(t));
  std::vector<std::uint8_t> buf(4096, 0xee);
  try {
    v.read(5 * 4096, buf);
    ADD_FAILURE() << "read of a corrupt block succeeded";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EIO);
    EXPECT_NE(std::string(e.what()).find("block 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos);
  }
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::uint8_t b) { return b == 0xee; }))
      << "unverified data reached the caller";
  EXPECT_EQ(v.read(6 * 4096, buf), 4096u);  // later reads still work
  EXPECT_TRUE(std::equal(buf.begin(), buf.end(), data_.begin() + 6 * 4096));
  EXPECT_EQ(v.stats().failures, 1u);
}

// Which of a 1 MiB file's 256 data blocks fail after one flipped bit at `sidecar_offset`
// (the tree: one top block, then two leaf-level blocks of 128 hashes each).
std::vector<int> failing_blocks(const fs::path& f, std::uint64_t sidecar_offset, workqueue& wq) {
  const merkle_tree t = enable(f, params{});
  const fs::path side = f.string() + ".verity";
  {
    std::fstream io(side, std::ios::binary | std::ios::in | std::ios::out);
    io.seekg(static_cast<std::streamoff>(sidecar_offset));
    char c = 0;
    io.get(c);
    io.seekp(static_cast<std::streamoff>(sidecar_offset));
    io.put(static_cast<char>(c ^ 1));
  }
  verified_file v(f, wq, pin(t));  // the tree is not part of the digest: only reads can tell
  std::vector<int> failed;
  std::vector<std::uint8_t> buf(4096);
  for (int b = 0; b < 256; ++b) {
    try {
      v.read(static_cast<std::uint64_t>(b) * 4096, buf);
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EIO);
      failed.push_back(b);
    }
  }
  return failed;
}

TEST_F(VerifiedReads, TamperingFailsExactlyTheAffectedReads) {
  workqueue wq("vq2");
  const fs::path f = make(1 << 20, 13);
  std::vector<int> first_leaf(128), all(256);
  for (int i = 0; i < 256; ++i)
    all[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < 128; ++i)
    first_leaf[static_cast<std::size_t>(i)] = i;
  // A bit in the first leaf-level hash block: the data blocks it covers, and only those.
  EXPECT_EQ(failing_blocks(f, 256 + 4096 + 8, wq), first_leaf);
  // A bit in the top (upper-level) hash block: every read climbs through it.
  EXPECT_EQ(failing_blocks(f, 256 + 8, wq), all);
}

TEST_F(VerifiedReads, BadSidecarsAreRejected) {
  workqueue wq("vq4");
  const fs::path f = make(1 << 20, 15);
  enable(f, params{});
  const fs::path side = f.string() + ".verity";
  {
    std::fstream io(side, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(9);
    io.put('\x7f');  // data_size no longer matches the file
  }
  try {
    verified_file bad(f, wq, trust_policy::integrity());
    ADD_FAILURE() << "a descriptor with the wrong size was accepted";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EINVAL);
  }
  {
    std::fstream io(side, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(9);
    io.put('\x00');  // the right size again
    io.seekp(2);
    io.put('\x1e');  // 2^30-byte blocks: a read would hold a gigabyte
  }
  try {
    verified_file bad(f, wq, trust_policy::integrity());
    ADD_FAILURE() << "a 1 GiB block size was accepted";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("2^30"), std::string::npos) << e.what();
  }
  fs::resize_file(side, 100);  // truncated: shorter than a descriptor
  EXPECT_THROW(verified_file(f, wq, trust_policy::integrity()), std::system_error);
  try {
    verified_file none(f, wq, trust_policy::integrity(), dir_ / "missing.verity");
    ADD_FAILURE();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENODATA);
  }
}

TEST_F(VerifiedReads, ConcurrentReadersAllVerify) {
  workqueue wq("vq3", wq_options{.unbound = true});
  const fs::path f = make(2 << 20, 14);
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq, pin(t));
  std::vector<std::thread> readers;
  std::atomic<int> mismatches{0};
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(r));
      std::vector<std::uint8_t> buf(8192);
      for (int i = 0; i < 300; ++i) {
        const std::uint64_t off = rng() % data_.size();
        const std::size_t n = v.read(off, buf);
        if (!std::equal(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n),
                        data_.begin() + static_cast<std::ptrdiff_t>(off)))
          ++mismatches;
      }
    });
  }
  for (auto& t : readers)
    t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(v.stats().failures, 0u);
}

}  // namespace
}  // namespace quiesce::verity
