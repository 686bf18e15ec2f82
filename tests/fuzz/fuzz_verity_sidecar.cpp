// SPDX-License-Identifier: Apache-2.0
// verified_file against hostile sidecars (FILE.verity is untrusted input), under every
// trust policy. The input is
//   [u8 mode][u8 params][u16 little-endian data length][data][rest]
// mode: bits 0-1 the policy - 0 integrity only, 1 a pinned digest, 2 signatures required,
//       3 a pinned digest and certificates; bit 2: the sidecar is the true one for the data
//       (under `params`), changed by the mutations in `rest` ([u16 offset][u8 xor]...),
//       else `rest` is the sidecar; bit 3: the true sidecar carries a built-in signature
//       made with the harness's key; bit 4: that signature signs a digest with one bit
//       flipped; bit 5: the pinned digest has one bit flipped.
// params: bit 0 sha512; bits 1-2 block size 1024, 2048, 4096, or the smallest (2 digests);
//       bits 3-5 salt length (0..7 bytes).
// The expected digest and the signature are the true ones (or flipped) for the data under
// `params`. Properties:
//  - opening throws std::system_error or succeeds;
//  - a pinned digest opens only a sidecar with exactly that digest; required signatures
//    open only a sidecar whose digest the harness's key signed;
//  - each read either returns exactly the file's bytes or throws std::system_error(EIO);
//  - if every block of a non-empty file was read successfully, the sidecar's root hash is
//    the true one for that data under the sidecar's parameters, and, when the open was
//    authenticated, so is the whole file digest: no wrong tree verifies, and no trusted
//    digest names other bytes.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "fuzz_check.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace {

namespace fs = std::filesystem;
namespace verity = quiesce::verity;
using bytes = std::vector<std::uint8_t>;

void write_file(const fs::path& p, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// The harness's signing key (EC P-256, fast to sign with) and its self-signed certificate,
// made once with libcrypto.
struct signer {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  verity::trusted_certs certs;

  signer() {
    key = EVP_EC_gen("P-256");
    cert = X509_new();
    FUZZ_CHECK(key && cert, "libcrypto: cannot make a test key");
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("fuzz"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    FUZZ_CHECK(X509_sign(cert, key, EVP_sha256()) > 0, "libcrypto: cannot sign the certificate");
    unsigned char* der = nullptr;
    const int n = i2d_X509(cert, &der);
    FUZZ_CHECK(n > 0, "libcrypto: cannot encode the certificate");
    certs.add(std::span<const std::uint8_t>(der, static_cast<std::size_t>(n)));
    OPENSSL_free(der);
  }

  // The detached PKCS#7 signature of `msg`, as `fsverity sign` makes it.
  bytes sign(const bytes& msg) const {
    BIO* in = BIO_new_mem_buf(msg.data(), static_cast<int>(msg.size()));
    PKCS7* p7 = PKCS7_sign(cert, key, nullptr, in,
                           PKCS7_BINARY | PKCS7_DETACHED | PKCS7_NOATTR | PKCS7_NOCERTS);
    FUZZ_CHECK(p7, "libcrypto: PKCS7_sign failed");
    unsigned char* der = nullptr;
    const int n = i2d_PKCS7(p7, &der);
    FUZZ_CHECK(n > 0, "libcrypto: cannot encode the signature");
    bytes out(der, der + n);
    OPENSSL_free(der);
    PKCS7_free(p7);
    BIO_free(in);
    return out;
  }
};

verity::params params_of(std::uint8_t b) {
  verity::params p;
  p.alg = (b & 1) ? verity::hash_alg::sha512 : verity::hash_alg::sha256;
  const int k = (b >> 1) & 3;
  p.block_size = k == 3 ? 2 * verity::digest_size(p.alg) : std::size_t{1024} << k;
  for (int i = 0; i < ((b >> 3) & 7); ++i)
    p.salt.push_back(static_cast<std::uint8_t>(0x11 * (i + 1)));
  return p;
}

bytes flipped(bytes d) {
  d[d.size() / 2] ^= 0x10;
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* input, std::size_t size) {
  static const fs::path dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("quiesce-fuzz-verity-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  static quiesce::workqueue wq("fuzz_verity", quiesce::wq_options{.highpri = true});
  static const signer harness;
  if (size < 4) return 0;
  const std::uint8_t mode = input[0];
  const verity::params p = params_of(input[1]);
  const std::size_t data_len =
      std::min<std::size_t>(input[2] | (std::size_t{input[3]} << 8), size - 4);
  const std::uint8_t* data = input + 4;
  const std::uint8_t* rest = data + data_len;
  const std::size_t rest_len = size - 4 - data_len;

  // The truth for the data under `p`, and what the harness trusts or signs.
  const verity::merkle_tree truth = verity::build_tree(data, data_len, p);
  const bytes true_digest = verity::file_digest(truth);
  const bytes pinned = (mode & 0x20) ? flipped(true_digest) : true_digest;
  const bytes signed_digest = (mode & 0x10) ? flipped(true_digest) : true_digest;

  bytes sidecar;
  bool signed_by_harness = false;
  if (mode & 4) {
    const auto desc = verity::descriptor(truth);
    sidecar.assign(desc.begin(), desc.end());
    if (mode & 8) {
      bytes msg = {'F',
                   'S',
                   'V',
                   'e',
                   'r',
                   'i',
                   't',
                   'y',
                   static_cast<std::uint8_t>(p.alg),
                   0,
                   static_cast<std::uint8_t>(signed_digest.size()),
                   0};
      msg.insert(msg.end(), signed_digest.begin(), signed_digest.end());
      const bytes sig = harness.sign(msg);
      for (int i = 0; i < 4; ++i)
        sidecar[4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(sig.size() >> (8 * i));
      sidecar.insert(sidecar.end(), sig.begin(), sig.end());
      signed_by_harness = true;
    }
    sidecar.insert(sidecar.end(), truth.tree.begin(), truth.tree.end());
    for (std::size_t i = 0; i + 3 <= rest_len && i < 4 * 3; i += 3) {
      const std::size_t at = (rest[i] | (std::size_t{rest[i + 1]} << 8)) % sidecar.size();
      sidecar[at] ^= rest[i + 2];
    }
  } else {
    sidecar.assign(rest, rest + rest_len);
  }

  verity::trust_policy policy;
  switch (mode & 3) {
    case 0:
      policy.integrity_only = true;
      break;
    case 1:
      policy.digest = verity::expected_digest{p.alg, pinned};
      break;
    case 2:
      policy.certs = harness.certs;
      policy.require_signatures = true;
      break;
    default:
      policy.digest = verity::expected_digest{p.alg, pinned};
      policy.certs = harness.certs;
      break;
  }

  const fs::path file = dir / "data", side = dir / "data.verity";
  write_file(file, data, data_len);
  write_file(side, sidecar.data(), sidecar.size());
  std::optional<verity::verified_file> v;
  try {
    v.emplace(file, wq, policy, side);
  } catch (const std::system_error&) {
    return 0;
  }
  FUZZ_CHECK(v->size() == data_len, "size %llu for %zu bytes",
             static_cast<unsigned long long>(v->size()), data_len);
  const verity::trust_result& trust = v->trust();
  if (policy.digest) {
    FUZZ_CHECK(trust.digest_matched && v->tree().p.alg == p.alg && v->digest() == pinned,
               "opened under a pinned digest that is not the file's");
  }
  if (policy.require_signatures) {
    FUZZ_CHECK(trust.signature_verified && signed_by_harness && v->digest() == signed_digest,
               "opened under required signatures without the harness's signature of its digest");
  }
  bool all_verified = true;
  std::vector<std::uint8_t> buf(3000);  // not a block multiple: reads straddle blocks
  for (std::uint64_t off = 0; off < data_len; off += buf.size()) {
    try {
      const std::size_t n = v->read(off, buf);
      FUZZ_CHECK(n == std::min<std::uint64_t>(buf.size(), data_len - off), "short read");
      FUZZ_CHECK(std::memcmp(buf.data(), data + off, n) == 0, "read returned other bytes");
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code().value() == EIO, "read failed with %s", e.what());
      all_verified = false;
    }
  }
  if (all_verified && data_len > 0) {
    const verity::merkle_tree real = verity::build_tree(data, data_len, v->tree().p);
    FUZZ_CHECK(real.root_hash == v->tree().root_hash,
               "a sidecar whose root hash is not the data's verified every read");
    if (trust.authenticated()) {
      FUZZ_CHECK(verity::file_digest(real) == v->digest(),
                 "an authenticated digest names other bytes than every read returned");
    }
  }
  return 0;
}
