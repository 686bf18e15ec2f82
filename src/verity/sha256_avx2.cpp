// SPDX-License-Identifier: Apache-2.0
// SHA-256 of eight messages at once, one per 32-bit lane of an AVX2 register. Compiled
// with -mavx2; called only on CPUs (and kernels) that support AVX2 (sha256_mb.cpp).
#include <immintrin.h>

#include "sha256_simd.hpp"

namespace quiesce::verity::detail::sha256 {
namespace {

struct avx2 {
  using reg = __m256i;
  static constexpr int lanes = 8;
  static reg set1(std::uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static reg add(reg a, reg b) { return _mm256_add_epi32(a, b); }
  static reg xor3(reg a, reg b, reg c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  template <int n>
  static reg ror(reg x) {
    return _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - n));
  }
  template <int n>
  static reg shr(reg x) {
    return _mm256_srli_epi32(x, n);
  }
  static reg ch(reg e, reg f, reg g) {  // (e & f) ^ (~e & g)
    return _mm256_xor_si256(_mm256_and_si256(e, _mm256_xor_si256(f, g)), g);
  }
  static reg maj(reg a, reg b, reg c) {  // (a & b) | (c & (a | b))
    return _mm256_or_si256(_mm256_and_si256(a, b), _mm256_and_si256(c, _mm256_or_si256(a, b)));
  }
  static void store(std::uint32_t* p, reg v) { _mm256_store_si256(reinterpret_cast<reg*>(p), v); }

  // Words [8h, 8h + 8) of the eight lanes' blocks: an 8x8 transpose of 32-bit words.
  static void load_half(const std::uint8_t* const* msgs, std::size_t offset, reg* w) {
    const reg bswap = _mm256_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13,
                                      14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    reg r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i)
      r[i] = _mm256_loadu_si256(reinterpret_cast<const reg*>(msgs[i] + offset));
    for (int i = 0; i < 8; i += 2) {  // pairs of lanes, interleaved by word
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // quads of lanes: u[i + k] holds words k and k + 4
      u[i + 0] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int k = 0; k < 4; ++k) {  // lanes 0-3 from u[k], lanes 4-7 from u[4 + k]
      w[k] = _mm256_shuffle_epi8(_mm256_permute2x128_si256(u[k], u[4 + k], 0x20), bswap);
      w[k + 4] = _mm256_shuffle_epi8(_mm256_permute2x128_si256(u[k], u[4 + k], 0x31), bswap);
    }
  }
  static void load_words(const std::uint8_t* const* msgs, std::size_t offset, reg (&w)[16]) {
    load_half(msgs, offset, w);
    load_half(msgs, offset + 32, w + 8);
  }
};

}  // namespace

void avx2_x8(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  simd_sha256<avx2>::hash(j, msgs, out);
}

}  // namespace quiesce::verity::detail::sha256
