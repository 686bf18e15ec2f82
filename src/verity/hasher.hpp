// Salted block hashing with libcrypto, shared by the tree builder and the verifier.
// Not installed.
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "quiesce/verity.hpp"

namespace quiesce::verity::detail {

// Initialises libcrypto once, without its atexit cleanup: that cleanup would run before the
// workqueue's workers exit (it registers later than the pools) and orphan their per-thread
// state. Without it, each thread's state is freed when the thread exits.
inline void init_crypto() {
  static const bool done = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  (void)done;
}

inline const EVP_MD* md_of(hash_alg alg) {
  return alg == hash_alg::sha512 ? EVP_sha512() : EVP_sha256();
}

struct ctx_deleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using ctx_ptr = std::unique_ptr<EVP_MD_CTX, ctx_deleter>;

// Hashes blocks as H(padded salt || block): the salted prefix is absorbed once, then copied.
class block_hasher {
 public:
  explicit block_hasher(const params& p)
      : md_((init_crypto(), md_of(p.alg))), base_(EVP_MD_CTX_new()), work_(EVP_MD_CTX_new()) {
    if (!base_ || !work_ || EVP_DigestInit_ex(base_.get(), md_, nullptr) != 1) {
      throw std::runtime_error("libcrypto: cannot initialise a digest");
    }
    if (!p.salt.empty()) {
      // Zero-padded to a multiple of the hash's internal block size (64 or 128).
      const std::size_t unit = p.alg == hash_alg::sha512 ? 128 : 64;
      std::vector<std::uint8_t> padded((p.salt.size() + unit - 1) / unit * unit, 0);
      std::copy(p.salt.begin(), p.salt.end(), padded.begin());
      EVP_DigestUpdate(base_.get(), padded.data(), padded.size());
    }
  }
  void hash(const std::uint8_t* block, std::size_t size, std::uint8_t* out) {
    EVP_MD_CTX_copy_ex(work_.get(), base_.get());
    EVP_DigestUpdate(work_.get(), block, size);
    EVP_DigestFinal_ex(work_.get(), out, nullptr);
  }

 private:
  const EVP_MD* md_;
  ctx_ptr base_, work_;
};

}  // namespace quiesce::verity::detail
