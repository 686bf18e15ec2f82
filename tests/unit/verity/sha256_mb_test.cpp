// SPDX-License-Identifier: Apache-2.0
// Multi-buffer SHA-256: every kernel this CPU runs gives OpenSSL's digest for every
// message length a Merkle tree uses (64 B .. 64 KiB blocks, with and without salt), for
// any number of messages (full calls and the rest), at any alignment; kernels the CPU
// cannot run are skipped, saying what they need. The calibration never picks a kernel
// slower than OpenSSL, and the batched hasher equals the one-block one.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hasher.hpp"
#include "sha256_mb.hpp"

namespace quiesce::verity::test {
namespace {

namespace sha = detail::sha256;

std::vector<std::uint8_t> bytes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

// OpenSSL's SHA-256 of (salt zero-padded to 64 bytes) || message.
std::vector<std::uint8_t> reference(const std::vector<std::uint8_t>& salt, const std::uint8_t* msg,
                                    std::size_t len) {
  std::vector<std::uint8_t> whole((salt.size() + 63) / 64 * 64, 0);
  std::copy(salt.begin(), salt.end(), whole.begin());
  whole.insert(whole.end(), msg, msg + len);
  std::vector<std::uint8_t> out(32);
  unsigned n = 0;
  EXPECT_EQ(EVP_Digest(whole.data(), whole.size(), out.data(), &n, EVP_sha256(), nullptr), 1);
  return out;
}

class Sha256Kernel : public testing::TestWithParam<std::string> {
 protected:
  const sha::variant& kernel() {
    const sha::variant* v = sha::find_variant(GetParam());
    if (!v) ADD_FAILURE() << GetParam() << " is not a kernel";
    return *v;
  }
};

TEST_P(Sha256Kernel, EqualsOpenSslForEveryTreeBlockSizeSaltAndCount) {
  const sha::variant& v = kernel();
  if (!v.runs_here) GTEST_SKIP() << v.name << " needs " << v.needs << ", which this CPU lacks";
  std::mt19937 rng(static_cast<unsigned>(v.lanes) * 7919);
  const std::size_t lanes = v.lanes;
  for (const std::size_t len : {64u, 128u, 1024u, 2048u, 4096u, 8192u, 16384u, 32768u, 65536u}) {
    for (const std::size_t salt_len : {0u, 1u, 19u, 32u}) {
      const std::vector<std::uint8_t> salt = bytes(salt_len, rng);
      const sha::prefix_state prefix = sha::absorb_padded(salt.data(), salt.size());
      // Full calls, the rest in every shape, and more than one call.
      for (const std::size_t n :
           {std::size_t{1}, lanes > 1 ? lanes - 1 : 1, lanes, lanes + 1, 2 * lanes + 3}) {
        // One byte off alignment: the kernels must not assume any.
        const std::vector<std::uint8_t> data = bytes(n * len + 1, rng);
        std::vector<const std::uint8_t*> msgs(n);
        for (std::size_t i = 0; i < n; ++i)
          msgs[i] = data.data() + 1 + i * len;
        std::vector<std::uint8_t> out(32 * n, 0xAA);
        sha::hash_many(prefix, msgs.data(), n, len, out.data(), &v);
        for (std::size_t i = 0; i < n; ++i) {
          const std::vector<std::uint8_t> want = reference(salt, msgs[i], len);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + 32 * i))
              << v.name << ": message " << i << " of " << n << ", " << len << " bytes, salt "
              << salt_len;
        }
      }
    }
  }
}

// The same message in every lane, and lanes that differ in one bit: no lane's result
// leaks into another's.
TEST_P(Sha256Kernel, LanesAreIndependent) {
  const sha::variant& v = kernel();
  if (!v.runs_here) GTEST_SKIP() << v.name << " needs " << v.needs << ", which this CPU lacks";
  std::mt19937 rng(5);
  constexpr std::size_t len = 4096;
  const std::vector<std::uint8_t> base = bytes(len, rng);
  std::vector<std::vector<std::uint8_t>> copies(v.lanes, base);
  for (std::size_t i = 1; i < v.lanes; ++i)
    copies[i][(i * 977) % len] ^= static_cast<std::uint8_t>(1u << (i % 8));
  std::vector<const std::uint8_t*> msgs;
  for (const auto& c : copies)
    msgs.push_back(c.data());
  std::vector<std::uint8_t> out(32 * v.lanes);
  sha::hash_many(sha::absorb_padded(nullptr, 0), msgs.data(), msgs.size(), len, out.data(), &v);
  for (std::size_t i = 0; i < v.lanes; ++i) {
    const std::vector<std::uint8_t> want = reference({}, msgs[i], len);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + 32 * i)) << "lane " << i;
  }
}

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const sha::variant& v : sha::variants())
    names.emplace_back(v.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Kernels, Sha256Kernel, testing::ValuesIn(kernel_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The choice is the fastest row measured - never a kernel slower than OpenSSL - unless the
// environment forced one.
TEST(Sha256Calibration, ChoosesTheFastestMeasuredNeverSlowerThanOpenSsl) {
  const sha::calibration& c = sha::calibrated();
  ASSERT_FALSE(c.rows.empty());
  EXPECT_EQ(c.rows.front().name, "openssl");
  double fastest = 0;
  for (const auto& r : c.rows) {
    const sha::variant* v = sha::find_variant(r.name);
    if (v) {
      EXPECT_EQ(r.mb_per_s > 0, v->runs_here) << r.name;
      EXPECT_EQ(r.not_here.empty(), v->runs_here) << r.name;
    }
    fastest = std::max(fastest, r.mb_per_s);
  }
  if (std::getenv("QUIESCE_SHA256")) GTEST_SKIP() << "QUIESCE_SHA256 forces the choice";
  const std::string chosen = c.chosen ? c.chosen->name : "openssl";
  const auto row = std::find_if(c.rows.begin(), c.rows.end(),
                                [&](const sha::calibration::row& r) { return r.name == chosen; });
  ASSERT_NE(row, c.rows.end());
  EXPECT_EQ(row->mb_per_s, fastest) << chosen << " chosen, not the fastest";
  EXPECT_GE(row->mb_per_s, c.rows.front().mb_per_s) << chosen << " is slower than OpenSSL";
}

// block_hasher::hash_many (the path the tree builder and the verifier take) equals
// hash() block by block, for both algorithms, with and without salt.
TEST(BlockHasher, BatchesEqualOneBlockAtATime) {
  std::mt19937 rng(9);
  for (const hash_alg alg : {hash_alg::sha256, hash_alg::sha512}) {
    for (const std::size_t bs : {1024u, 4096u, 65536u}) {
      for (const std::size_t salt_len : {0u, 7u, 32u}) {
        params p;
        p.alg = alg;
        p.block_size = bs;
        p.salt = bytes(salt_len, rng);
        detail::block_hasher h(p);
        const std::size_t d = digest_size(alg), n = 21;
        const std::vector<std::uint8_t> data = bytes(n * bs, rng);
        std::vector<const std::uint8_t*> blocks(n);
        for (std::size_t i = 0; i < n; ++i)
          blocks[i] = &data[i * bs];
        std::vector<std::uint8_t> batch(n * d), one(d);
        ASSERT_EQ(h.hash_many(blocks.data(), n, batch.data()), n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(h.hash(blocks[i], bs, one.data()));
          EXPECT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + i * d))
              << to_string(alg) << " block " << i << " of " << bs << " bytes, salt " << salt_len;
        }
      }
    }
  }
}

}  // namespace
}  // namespace quiesce::verity::test
