// SPDX-License-Identifier: Apache-2.0
// Trust: expected digests, trusted certificates, and the check of fs-verity built-in
// signatures with libcrypto (kernel: fs/verity/signature.c, verify_pkcs7_signature against
// the ".fs-verity" keyring - the signer's certificate must be one of the trusted ones).
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "hasher.hpp"
#include "mutant.hpp"
#include "quiesce/verity.hpp"
#include "regular_file.hpp"
#include "trust.hpp"

namespace quiesce::verity {

struct trusted_certs::impl {
  std::vector<std::shared_ptr<X509>> certs;  // I: never changed once shared
};

// The certificates of a trusted_certs, for the check below.
struct cert_access {
  static const std::vector<std::shared_ptr<X509>>& certs(const trusted_certs& c) {
    return c.impl_->certs;
  }
};

namespace {

[[noreturn]] void crypto_fail(int err, const std::string& what) {
  ERR_clear_error();  // libcrypto's per-thread error queue: nothing left for the next caller
  throw std::system_error(err, std::generic_category(), what);
}

std::shared_ptr<X509> own(X509* x) {
  return std::shared_ptr<X509>(x, X509_free);
}

struct bio_deleter {
  void operator()(BIO* b) const { BIO_free_all(b); }
};
using bio_ptr = std::unique_ptr<BIO, bio_deleter>;
struct pkcs7_deleter {
  void operator()(PKCS7* p) const { PKCS7_free(p); }
};
using pkcs7_ptr = std::unique_ptr<PKCS7, pkcs7_deleter>;
struct x509_stack_deleter {  // the stack only: its certificates are owned elsewhere
  void operator()(STACK_OF(X509) * s) const { sk_X509_free(s); }
};
using x509_stack_ptr = std::unique_ptr<STACK_OF(X509), x509_stack_deleter>;
struct store_deleter {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};

bio_ptr mem_bio(std::span<const std::uint8_t> bytes) {
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX)) return nullptr;
  return bio_ptr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// One DER PKCS#7 SignedData spanning `sig` exactly, or nullptr.
pkcs7_ptr parse_pkcs7(std::span<const std::uint8_t> sig) {
  if (sig.empty() || sig.size() > static_cast<std::size_t>(INT32_MAX)) return nullptr;
  const unsigned char* p = sig.data();
  pkcs7_ptr p7(d2i_PKCS7(nullptr, &p, static_cast<long>(sig.size())));
  if (!p7 || p != sig.data() + sig.size() || !PKCS7_type_is_signed(p7.get())) return nullptr;
  return p7;
}

std::string subject_of(X509* x) {
  char buf[256] = {};
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof buf);
  return buf;
}

std::string digest_text(hash_alg alg, std::span<const std::uint8_t> d) {
  return std::string(to_string(alg)) + ":" + to_hex(std::vector<std::uint8_t>(d.begin(), d.end()));
}

// Verifies the built-in signature of a file with `digest`; returns the signer's subject.
std::string verify_signature(const trusted_certs& trusted, hash_alg alg,
                             std::span<const std::uint8_t> digest,
                             std::span<const std::uint8_t> signature, const std::string& what) {
  detail::init_crypto();
  ERR_clear_error();
  const pkcs7_ptr p7 = parse_pkcs7(signature);
  if (!p7) crypto_fail(EBADMSG, what + ": malformed file signature (not a DER PKCS#7 signature)");
  STACK_OF(PKCS7_SIGNER_INFO)* infos = PKCS7_get_signer_info(p7.get());
  if (!infos || sk_PKCS7_SIGNER_INFO_num(infos) <= 0) {
    crypto_fail(EBADMSG, what + ": malformed file signature (no signer)");
  }
  x509_stack_ptr stack(sk_X509_new_null());
  if (!stack) crypto_fail(ENOMEM, what + ": libcrypto: no memory");
  for (const auto& c : cert_access::certs(trusted)) {
    if (sk_X509_push(stack.get(), c.get()) <= 0)
      crypto_fail(ENOMEM, what + ": libcrypto: no memory");
  }
  // The signers, looked up among the trusted certificates only (never the ones the
  // signature itself might carry).
  x509_stack_ptr signers(PKCS7_get0_signers(p7.get(), stack.get(), PKCS7_NOINTERN));
  if (!signers || sk_X509_num(signers.get()) <= 0) {
    crypto_fail(ENOKEY, what + ": the file's signing certificate is not a trusted one");
  }
  const std::vector<std::uint8_t> msg = detail::formatted_digest(alg, digest);
  // The message behind a buffering filter: PKCS7_verify copies a bare memory BIO into one
  // of its own, which libcrypto 3.0 leaks when the signature names an unusable digest.
  bio_ptr data(BIO_new(BIO_f_buffer()));
  if (data) {
    bio_ptr mem = mem_bio(msg);
    if (!mem) {
      data.reset();
    } else {
      BIO_push(data.get(), mem.release());  // freed with `data` (BIO_free_all below)
    }
  }
  const std::unique_ptr<X509_STORE, store_deleter> store(X509_STORE_new());
  if (!data || !store) crypto_fail(ENOMEM, what + ": libcrypto: no memory");
  // NOVERIFY/NOCHAIN: the signer is trusted because it is in the set, as in the kernel's
  // keyring, not through a chain; NOINTERN: only the trusted certificates are used.
  const int flags = PKCS7_NOINTERN | PKCS7_NOVERIFY | PKCS7_NOCHAIN | PKCS7_BINARY;
  if (PKCS7_verify(p7.get(), stack.get(), store.get(), data.get(), nullptr, flags) != 1 &&
      !mutant::verity_signature_unchecked) {
    crypto_fail(EKEYREJECTED,
                what + ": incorrect file signature: it does not sign " + digest_text(alg, digest));
  }
  std::string signer = subject_of(sk_X509_value(signers.get(), 0));
  ERR_clear_error();
  return signer;
}

}  // namespace

trusted_certs::trusted_certs() : impl_(std::make_shared<impl>()) {}
trusted_certs::~trusted_certs() = default;
trusted_certs::trusted_certs(const trusted_certs&) = default;
trusted_certs& trusted_certs::operator=(const trusted_certs&) = default;

std::size_t trusted_certs::size() const noexcept {
  return impl_->certs.size();
}

void trusted_certs::add(std::span<const std::uint8_t> pem_or_der) {
  detail::init_crypto();
  ERR_clear_error();
  std::vector<std::shared_ptr<X509>> found;
  const std::string_view text(reinterpret_cast<const char*>(pem_or_der.data()), pem_or_der.size());
  if (text.find("-----BEGIN") != std::string_view::npos) {
    const bio_ptr bio = mem_bio(pem_or_der);
    if (!bio) throw std::invalid_argument("cert: too large");
    while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
      found.push_back(own(x));
  } else if (!pem_or_der.empty() && pem_or_der.size() <= static_cast<std::size_t>(INT32_MAX)) {
    const unsigned char* p = pem_or_der.data();
    X509* x = d2i_X509(nullptr, &p, static_cast<long>(pem_or_der.size()));
    if (x) found.push_back(own(x));
    if (x && p != pem_or_der.data() + pem_or_der.size()) found.clear();  // trailing bytes
  }
  ERR_clear_error();
  if (found.empty()) {
    throw std::invalid_argument("cert: no X.509 certificate (PEM or DER) in the input");
  }
  auto next = std::make_shared<impl>(*impl_);  // copies share the old set, unchanged
  next->certs.insert(next->certs.end(), found.begin(), found.end());
  impl_ = std::move(next);
}

void trusted_certs::add_file(const std::filesystem::path& path) {
  const detail::regular_file f = detail::open_regular(path);
  constexpr std::uint64_t limit = 1 << 20;
  if (f.size > limit) {
    throw std::invalid_argument(fmt::format("cert: '{}' is over {} bytes", path.string(), limit));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(f.size));
  if (const int err = detail::pread_exact(f.fd.get(), bytes.data(), bytes.size(), 0)) {
    throw std::system_error(err, std::generic_category(), path.string());
  }
  try {
    add(bytes);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("cert: '" + path.string() + "' holds no X.509 certificate");
  }
}

expected_digest expected_digest::parse(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    throw std::invalid_argument("digest: '" + std::string(text) + "' is not ALG:HEX");
  }
  expected_digest e;
  try {
    e.alg = parse_hash_alg(text.substr(0, colon));
    e.digest = from_hex(text.substr(colon + 1));
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("digest: '" + std::string(text) +
                                "' is not ALG:HEX (sha256 or sha512, then hex digits)");
  }
  if (e.digest.size() != digest_size(e.alg)) {
    throw std::invalid_argument(fmt::format("digest: '{}' has {} bytes, a {} digest has {}", text,
                                            e.digest.size(), to_string(e.alg), digest_size(e.alg)));
  }
  return e;
}

trust_policy trust_policy::pinned(expected_digest d) {
  trust_policy t;
  t.digest = std::move(d);
  return t;
}

trust_policy trust_policy::signed_by(trusted_certs c) {
  trust_policy t;
  t.certs = std::move(c);
  t.require_signatures = true;
  return t;
}

trust_policy trust_policy::integrity() {
  trust_policy t;
  t.integrity_only = true;
  return t;
}

namespace detail {

std::vector<std::uint8_t> formatted_digest(hash_alg alg, std::span<const std::uint8_t> digest) {
  std::vector<std::uint8_t> msg = {'F', 'S', 'V', 'e', 'r', 'i', 't', 'y'};
  const auto a = static_cast<std::uint16_t>(alg);
  const auto size = static_cast<std::uint16_t>(digest.size());
  msg.push_back(static_cast<std::uint8_t>(a & 0xff));
  msg.push_back(static_cast<std::uint8_t>(a >> 8));
  msg.push_back(static_cast<std::uint8_t>(size & 0xff));
  msg.push_back(static_cast<std::uint8_t>(size >> 8));
  msg.insert(msg.end(), digest.begin(), digest.end());
  return msg;
}

bool is_pkcs7_signature(std::span<const std::uint8_t> sig) {
  init_crypto();
  const bool ok = parse_pkcs7(sig) != nullptr;
  ERR_clear_error();
  return ok;
}

trust_result check_trust(const trust_policy& policy, hash_alg alg,
                         std::span<const std::uint8_t> digest,
                         std::span<const std::uint8_t> signature, const std::string& what) {
  if (!policy.digest && policy.certs.empty() && !policy.require_signatures &&
      !policy.integrity_only) {
    throw std::invalid_argument(
        "trust: the policy names no trusted digest or certificate (integrity_only must be "
        "asked for)");
  }
  trust_result r;
  if (policy.digest) {
    if ((policy.digest->alg != alg ||
         !std::equal(digest.begin(), digest.end(), policy.digest->digest.begin(),
                     policy.digest->digest.end())) &&
        !mutant::verity_digest_not_pinned) {
      crypto_fail(EKEYREJECTED, what + ": file digest " + digest_text(alg, digest) +
                                    " is not the trusted " +
                                    digest_text(policy.digest->alg, policy.digest->digest));
    }
    r.digest_matched = true;
  }
  if (!signature.empty() && (!policy.certs.empty() || policy.require_signatures)) {
    if (policy.certs.empty())
      crypto_fail(ENOKEY, what + ": signed file, and no trusted certificates");
    r.signer = verify_signature(policy.certs, alg, digest, signature, what);
    r.signature_verified = true;
  }
  if (policy.require_signatures && !r.signature_verified && !mutant::verity_unsigned_allowed) {
    crypto_fail(policy.certs.empty() ? ENOKEY : EPERM,
                what + ": signatures are required, rejecting unsigned file");
  }
  if (!r.authenticated() && !policy.integrity_only) {
    crypto_fail(EPERM,
                what + ": not authenticated: no trusted digest matched and no signature verified");
  }
  return r;
}

}  // namespace detail
}  // namespace quiesce::verity
