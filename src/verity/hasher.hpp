// SPDX-License-Identifier: Apache-2.0
// Salted block hashing, shared by the tree builder and the verifier: one block with
// libcrypto, or many at once - SHA-256 through the multi-buffer kernels (sha256_mb.hpp)
// when the start-up calibration found one faster than libcrypto - and the test seam that
// makes one libcrypto call fail. Not installed.
//
// Fail closed: every libcrypto call's result is checked; a hash that could not be computed
// is reported (hash() returns false, the constructor throws) and its output is never used.
// The kernels are computation only and cannot fail; while the fault hook is set, batches
// go through libcrypto so that the faults reach them.
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "mutant.hpp"
#include "quiesce/verity.hpp"
#include "sha256_mb.hpp"

namespace quiesce::verity::detail {

// ---- test seam: fault injection into the hasher's libcrypto calls -------------------------
// The calls the hasher makes, for the fault hook.
enum class evp_call { init, update, copy, final };
// When set, called before each of the hasher's libcrypto calls (any thread); returning true
// skips that call and reports it failed, as the call's contract allows it to fail (its
// output left as it was). nullptr - the default, and the only value outside tests - costs
// one relaxed load per call. Tests set it while no hashing runs and reset it after.
inline std::atomic<bool (*)(evp_call)> evp_fault_hook{nullptr};

// Runs `call` (a libcrypto call returning 1 on success) unless the hook fails it.
template <typename Call>
[[nodiscard]] bool evp_ok(evp_call which, Call&& call) {
  if (bool (*hook)(evp_call) = evp_fault_hook.load(std::memory_order_relaxed); hook && hook(which))
    return false;
  return call() == 1;
}

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
  // Throws std::runtime_error naming libcrypto if the digest cannot be set up (no such
  // algorithm, no memory, a failed call).
  explicit block_hasher(const params& p)
      : md_((init_crypto(), md_of(p.alg))),
        base_(EVP_MD_CTX_new()),
        work_(EVP_MD_CTX_new()),
        block_size_(p.block_size),
        digest_size_(digest_size(p.alg)) {
    if (!md_ || !base_ || !work_ ||
        !evp_ok(evp_call::init, [&] { return EVP_DigestInit_ex(base_.get(), md_, nullptr); })) {
      throw std::runtime_error(std::string("libcrypto: cannot initialise a ") + to_string(p.alg) +
                               " digest");
    }
    if (!p.salt.empty()) {
      // Zero-padded to a multiple of the hash's internal block size (64 or 128).
      const std::size_t unit = p.alg == hash_alg::sha512 ? 128 : 64;
      std::vector<std::uint8_t> padded((p.salt.size() + unit - 1) / unit * unit, 0);
      std::copy(p.salt.begin(), p.salt.end(), padded.begin());
      if (!evp_ok(evp_call::update,
                  [&] { return EVP_DigestUpdate(base_.get(), padded.data(), padded.size()); })) {
        throw std::runtime_error("libcrypto: cannot hash the salt");
      }
    }
    if (p.alg == hash_alg::sha256 && p.block_size % 64 == 0) {
      kernel_ = sha256::calibrated().chosen;
      prefix_ = sha256::absorb_padded(p.salt.data(), p.salt.size());
    }
  }
  // Writes H(padded salt || block) to `out` (the digest size). False if any libcrypto call
  // failed: `out` then holds zeros, and must not be used.
  [[nodiscard]] bool hash(const std::uint8_t* block, std::size_t size, std::uint8_t* out) {
    const std::size_t d = static_cast<std::size_t>(EVP_MD_get_size(md_));
    std::memset(out, 0, d);
    unsigned len = 0;
    const bool ok =
        evp_ok(evp_call::copy, [&] { return EVP_MD_CTX_copy_ex(work_.get(), base_.get()); }) &&
        evp_ok(evp_call::update, [&] { return EVP_DigestUpdate(work_.get(), block, size); }) &&
        evp_ok(evp_call::final, [&] { return EVP_DigestFinal_ex(work_.get(), out, &len); }) &&
        len == d;
    if (mutant::verity_hash_fails_open) return true;
    if (!ok) std::memset(out, 0, d);
    return ok;
  }
  // Writes the hash of each of `n` blocks (block_size bytes at blocks[i]) to out + i *
  // digest size. Returns n, or the index of the first block whose hash failed: then no
  // output from that one on may be used.
  [[nodiscard]] std::size_t hash_many(const std::uint8_t* const* blocks, std::size_t n,
                                      std::uint8_t* out) {
    if (kernel_ && !evp_fault_hook.load(std::memory_order_relaxed)) {
      sha256::hash_many(prefix_, blocks, n, block_size_, out, kernel_);
      return n;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (!hash(blocks[i], block_size_, out + i * digest_size_)) return i;
    return n;
  }

 private:
  const EVP_MD* md_;
  ctx_ptr base_, work_;
  std::size_t block_size_, digest_size_;
  const sha256::variant* kernel_ = nullptr;  // the batches' kernel; nullptr: libcrypto
  sha256::prefix_state prefix_{};            // the padded salt, absorbed (kernel_ only)
};

}  // namespace quiesce::verity::detail
