// SPDX-License-Identifier: Apache-2.0
// The root of trust: a pinned file digest, and fs-verity built-in signatures made by
// fsverity-utils (`fsverity sign`, the interoperability oracle) checked against trusted
// certificates. Keys and certificates are made at test time with the openssl command.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "verity_test_util.hpp"

namespace quiesce::verity::test {
namespace {

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

class Trust : public scratch_dir {
 protected:
  // Two self-signed test keys, made once: `trusted` and `other`.
  static void SetUpTestSuite() {
    keys_ = new fs::path(fs::temp_directory_path() /
                         ("quiesce-verity-keys-" + std::to_string(::getpid())));
    fs::create_directories(*keys_);
    for (const char* name : {"trusted", "other"}) {
      const std::string k = (*keys_ / name).string();
      ASSERT_EQ(sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=quiesce-" +
                   std::string(name) + " -keyout " + k + ".key -out " + k + ".pem"),
                0)
          << "the openssl command is needed to make test keys";
      ASSERT_EQ(sh("openssl x509 -in " + k + ".pem -outform DER -out " + k + ".der"), 0);
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*keys_);
    delete keys_;
  }
  void SetUp() override {
    scratch_dir::SetUp();
    ASSERT_EQ(sh("fsverity --version"), 0) << "the oracle `fsverity` is missing";
  }
  static fs::path key(const char* name, const char* ext) {
    return *keys_ / (std::string(name) + "." + ext);
  }
  static trusted_certs certs(const char* name) {
    trusted_certs c;
    c.add_file(key(name, "pem"));
    return c;
  }
  // `fsverity sign FILE` with `name`'s key; extra: --hash-alg etc. Returns the signature.
  std::vector<std::uint8_t> fsverity_sign(const fs::path& file, const char* name,
                                          const std::string& extra = "") {
    const fs::path sig = dir_ / "sig";
    EXPECT_EQ(sh("fsverity sign '" + file.string() + "' '" + sig.string() + "' --key=" +
                 key(name, "key").string() + " --cert=" + key(name, "pem").string() + " " + extra),
              0);
    return read_all(sig);
  }

  static fs::path* keys_;
  workqueue wq_{"verity_trust_test"};
};
fs::path* Trust::keys_ = nullptr;

TEST_F(Trust, ASignatureFromFsveritySignVerifiesWithItsCertificate) {
  struct variant {
    params p;
    std::string flags;
  };
  for (const variant& v :
       {variant{params{}, ""}, variant{params{hash_alg::sha512, 1024, {0xab, 0xcd}},
                                       "--hash-alg=sha512 --block-size=1024 --salt=abcd"}}) {
    const fs::path f = write("f", random_bytes(300'000, 1));
    const merkle_tree t = enable(f, v.p, {}, nullptr, fsverity_sign(f, "trusted", v.flags));
    verified_file file(f, wq_, trust_policy::signed_by(certs("trusted")));
    EXPECT_TRUE(file.trust().signature_verified);
    EXPECT_FALSE(file.trust().digest_matched);
    EXPECT_NE(file.trust().signer.find("CN=quiesce-trusted"), std::string::npos)
        << file.trust().signer;
    EXPECT_EQ(file.digest(), file_digest(t));
    EXPECT_FALSE(file.signature().empty());
    std::vector<std::uint8_t> out(file.size());
    EXPECT_EQ(file.read(0, out), out.size());
    EXPECT_EQ(out, random_bytes(300'000, 1));
    // The certificate in DER works the same; a digest pinned as well must also match.
    trusted_certs der;
    der.add_file(key("trusted", "der"));
    trust_policy both = trust_policy::signed_by(der);
    both.digest = expected_digest{t.p.alg, file_digest(t)};
    verified_file again(f, wq_, both);
    EXPECT_TRUE(again.trust().signature_verified && again.trust().digest_matched);
  }
}

TEST_F(Trust, AnotherKeysSignatureOrCertificateIsRejected) {
  const fs::path f = write("f", random_bytes(50'000, 2));
  enable(f, params{}, {}, nullptr, fsverity_sign(f, "other"));
  std::string what;
  EXPECT_EQ(
      error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }, &what),
      ENOKEY)
      << what;
  EXPECT_NE(what.find("not a trusted one"), std::string::npos) << what;
  // Without certificates, a signed file cannot be accepted under require_signatures.
  trust_policy none;
  none.require_signatures = true;
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, none); }), ENOKEY);
  // Both certificates trusted: the signer is found.
  trusted_certs both = certs("trusted");
  both.add_file(key("other", "pem"));
  EXPECT_EQ(both.size(), 2u);
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, trust_policy::signed_by(both)); }), 0);
}

// The signature covers the file digest, and the digest covers the whole descriptor: a bit
// flipped anywhere in what was signed is rejected.
TEST_F(Trust, AFlippedDigestBitIsRejected) {
  const fs::path f = write("f", random_bytes(50'000, 3));
  const merkle_tree t = enable(f, params{}, {}, nullptr, fsverity_sign(f, "trusted"));
  const fs::path side = f.string() + ".verity";
  const auto original = read_all(side);
  // A bit of the root hash in the descriptor: a different file digest.
  flip_bit(side, 16 + 3);
  std::string what;
  EXPECT_EQ(
      error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }, &what),
      EKEYREJECTED)
      << what;
  EXPECT_NE(what.find("incorrect file signature"), std::string::npos) << what;
  // The same file pinned by a digest with one bit flipped.
  std::vector<std::uint8_t> d = file_digest(t);
  d[31] ^= 0x80;
  write("side", original);
  fs::rename(dir_ / "side", side);
  EXPECT_EQ(error_of(
                [&] {
                  verified_file(f, wq_, trust_policy::pinned({hash_alg::sha256, d}));
                },
                &what),
            EKEYREJECTED)
      << what;
  EXPECT_NE(what.find("is not the trusted"), std::string::npos) << what;
  // The right digest, but named as another algorithm.
  EXPECT_EQ(error_of([&] {
              verified_file(
                  f, wq_,
                  trust_policy::pinned({hash_alg::sha512, std::vector<std::uint8_t>(64, 0)}));
            }),
            EKEYREJECTED);
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, pin(t)); }), 0);
}

// The attack: rewrite the data and regenerate the sidecar. A pinned digest or a
// signature refuses it; integrity-only mode cannot tell (and says so).
TEST_F(Trust, RewrittenDataAndSidecarAreRefusedUnderTrust) {
  const fs::path f = write("f", random_bytes(40'000, 4));
  const merkle_tree t = enable(f, params{}, {}, nullptr, fsverity_sign(f, "trusted"));
  const std::vector<std::uint8_t> sig = verified_file(f, wq_, pin(t)).signature();
  write("f", random_bytes(40'000, 5));    // the attacker's bytes...
  enable(f, params{}, {}, nullptr, sig);  // ...a fresh tree, and the old signature
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, pin(t)); }), EKEYREJECTED);
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }),
            EKEYREJECTED);
  enable(f, params{});  // no signature at all
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }),
            EPERM);
  verified_file unauthenticated(f, wq_, trust_policy::integrity());
  EXPECT_FALSE(unauthenticated.trust().authenticated());
}

// Why the digest and not the root hash: a file ending in zeros keeps its root hash when
// truncated within its last block, and the descriptor's data_size can be lowered to match.
TEST_F(Trust, TruncatingAZeroTailKeepsTheRootButNotTheDigest) {
  std::vector<std::uint8_t> bytes = random_bytes(4096 + 100, 6);
  std::fill(bytes.begin() + 4096, bytes.end(), 0);
  const fs::path f = write("f", bytes);
  const merkle_tree t = enable(f, params{});
  fs::resize_file(f, 4096 + 10);
  const merkle_tree shorter = enable(f, params{});
  EXPECT_EQ(shorter.root_hash, t.root_hash);  // the root alone cannot tell
  std::string what;
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, pin(t)); }, &what), EKEYREJECTED) << what;
}

TEST_F(Trust, PoliciesThatAuthenticateNothingAreRefused) {
  const fs::path f = write("f", random_bytes(10'000, 7));
  const merkle_tree t = enable(f, params{});
  EXPECT_THROW(verified_file(f, wq_, trust_policy{}), std::invalid_argument);
  // Certificates, an unsigned file, no digest and signatures not required: not
  // authenticated, so not opened.
  trust_policy certs_only;
  certs_only.certs = certs("trusted");
  std::string what;
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, certs_only); }, &what), EPERM) << what;
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }),
            EPERM);
  certs_only.digest = expected_digest{t.p.alg, file_digest(t)};
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, certs_only); }), 0);
  certs_only.require_signatures = true;  // the digest alone is not enough now
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, certs_only); }), EPERM);
}

TEST_F(Trust, MalformedSignaturesAreRejected) {
  const fs::path f = write("f", random_bytes(10'000, 8));
  const std::vector<std::uint8_t> junk(100, 0x30);
  EXPECT_THROW(enable(f, params{}, {}, nullptr, junk), std::invalid_argument);
  EXPECT_THROW(enable(f, params{}, {}, nullptr, std::vector<std::uint8_t>(max_signature_size + 1)),
               std::invalid_argument);
  EXPECT_FALSE(fs::exists(f.string() + ".verity"));  // nothing written
  // A sidecar carrying junk as its signature (written around enable's check).
  const merkle_tree t = enable(f, params{});
  auto side = read_all(f.string() + ".verity");
  side[4] = static_cast<std::uint8_t>(junk.size());
  side.insert(side.begin() + 256, junk.begin(), junk.end());
  write("f.verity", side);
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, trust_policy::signed_by(certs("trusted"))); }),
            EBADMSG);
  // Not looked at without certificates: the pinned digest decides.
  EXPECT_EQ(error_of([&] { verified_file(f, wq_, pin(t)); }), 0);
}

TEST_F(Trust, CertificatesAndDigestsAreParsedStrictly) {
  trusted_certs c;
  EXPECT_THROW(c.add(std::vector<std::uint8_t>{1, 2, 3}), std::invalid_argument);
  const std::string junk_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  EXPECT_THROW(c.add(std::vector<std::uint8_t>(junk_pem.begin(), junk_pem.end())),
               std::invalid_argument);
  EXPECT_THROW(c.add_file(key("trusted", "key").string() + ".missing"), std::system_error);
  // A bundle: two PEM certificates in one file.
  write("bundle.pem", read_all(key("trusted", "pem")));
  {
    std::ofstream out(dir_ / "bundle.pem", std::ios::app | std::ios::binary);
    const auto other = read_all(key("other", "pem"));
    out.write(reinterpret_cast<const char*>(other.data()),
              static_cast<std::streamsize>(other.size()));
  }
  c.add_file(dir_ / "bundle.pem");
  EXPECT_EQ(c.size(), 2u);
  const trusted_certs copy = c;
  c.add_file(key("trusted", "der"));
  EXPECT_EQ(copy.size(), 2u);  // copies keep their set
  EXPECT_EQ(c.size(), 3u);

  const expected_digest e = expected_digest::parse(
      "sha256:3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af95");
  EXPECT_EQ(e.alg, hash_alg::sha256);
  EXPECT_EQ(to_hex(e.digest), "3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af95");
  for (const char* bad :
       {"3d248ca5", "md5:00", "sha256:abc", "sha256:zz", "sha512:3d24",
        "sha256:3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af"}) {
    try {
      expected_digest::parse(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& err) {
      EXPECT_EQ(std::string(err.what()).rfind("digest:", 0), 0u) << err.what();
    }
  }
}

}  // namespace
}  // namespace quiesce::verity::test
