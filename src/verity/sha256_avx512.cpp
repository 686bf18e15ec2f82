// SPDX-License-Identifier: Apache-2.0
// SHA-256 of sixteen messages at once, one per 32-bit lane of an AVX-512 register, with
// its rotate and three-input logic instructions. Compiled with -mavx512f -mavx512bw;
// called only on CPUs (and kernels) that support both (sha256_mb.cpp).
#include <immintrin.h>

#include "sha256_simd.hpp"

namespace quiesce::verity::detail::sha256 {
namespace {

struct avx512 {
  using reg = __m512i;
  static constexpr int lanes = 16;
  static reg set1(std::uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static reg add(reg a, reg b) { return _mm512_add_epi32(a, b); }
  static reg xor3(reg a, reg b, reg c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
  template <int n>
  static reg ror(reg x) {
    return _mm512_ror_epi32(x, n);
  }
  template <int n>
  static reg shr(reg x) {
    return _mm512_srli_epi32(x, n);
  }
  static reg ch(reg e, reg f, reg g) { return _mm512_ternarylogic_epi32(e, f, g, 0xCA); }
  static reg maj(reg a, reg b, reg c) { return _mm512_ternarylogic_epi32(a, b, c, 0xE8); }
  static void store(std::uint32_t* p, reg v) { _mm512_store_si512(p, v); }

  // The 16 words of the sixteen lanes' blocks: a 16x16 transpose of 32-bit words - within
  // 128-bit chunks first, then of the chunks.
  static void load_words(const std::uint8_t* const* msgs, std::size_t offset, reg (&w)[16]) {
    const reg bswap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
    reg r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i)
      r[i] = _mm512_loadu_si512(msgs[i] + offset);
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    // u[4q + k], chunk c: word 4c + k of lanes 4q..4q+3.
    for (int q = 0; q < 16; q += 4) {
      u[q + 0] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
      u[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
      u[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
      u[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
    }
    for (int k = 0; k < 4; ++k) {
      // Word 4c + k wants chunk c of u[k], u[4 + k], u[8 + k], u[12 + k], in that order.
      const reg v0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);                   // a0 a1 b0 b1
      const reg v1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);                   // a2 a3 b2 b3
      const reg v2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);              // c0 c1 d0 d1
      const reg v3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);              // c2 c3 d2 d3
      w[k] = _mm512_shuffle_epi8(_mm512_shuffle_i32x4(v0, v2, 0x88), bswap);       // chunk 0
      w[4 + k] = _mm512_shuffle_epi8(_mm512_shuffle_i32x4(v0, v2, 0xDD), bswap);   // chunk 1
      w[8 + k] = _mm512_shuffle_epi8(_mm512_shuffle_i32x4(v1, v3, 0x88), bswap);   // chunk 2
      w[12 + k] = _mm512_shuffle_epi8(_mm512_shuffle_i32x4(v1, v3, 0xDD), bswap);  // chunk 3
    }
  }
};

}  // namespace

void avx512_x16(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  simd_sha256<avx512>::hash(j, msgs, out);
}

}  // namespace quiesce::verity::detail::sha256
