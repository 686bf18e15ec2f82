// SPDX-License-Identifier: Apache-2.0
// SHA-256 with the SHA extensions (SHA-NI): one message, and two or four messages
// interleaved. sha256rnds2 takes several cycles to produce its result but a new one can
// start every cycle or two, so independent messages fill the gaps one message leaves.
// Compiled with -msha -msse4.1; called only on CPUs that have both (sha256_mb.cpp).
#include <immintrin.h>

#include "sha256_kernels.hpp"

namespace quiesce::verity::detail::sha256 {

namespace {

// The state as sha256rnds2 wants it: words a, b, e, f in one register and c, d, g, h in
// the other (highest lane first).
struct lane_state {
  __m128i abef, cdgh;
};

inline lane_state to_lanes(const std::uint32_t* h) {
  const __m128i abcd =
      _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), 0xB1);
  const __m128i efgh =
      _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4)), 0x1B);
  return {_mm_alignr_epi8(abcd, efgh, 8), _mm_blend_epi16(efgh, abcd, 0xF0)};
}

// Writes the digest: words a..h, each big-endian.
inline void store_digest(const lane_state& s, std::uint8_t* out) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  const __m128i feba = _mm_shuffle_epi32(s.abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(s.cdgh, 0xB1);
  const __m128i abcd = _mm_blend_epi16(feba, dchg, 0xF0);
  const __m128i efgh = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(abcd, bswap));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_shuffle_epi8(efgh, bswap));
}

// One 64-byte block of each of N messages, interleaved group by group (four rounds each).
template <int N>
inline void compress(lane_state (&s)[N], const std::uint8_t* const (&block)[N]) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  lane_state start[N];
  __m128i w[N][4];  // the last four groups of the message schedule, per lane
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i)
    start[i] = s[i];
#pragma GCC unroll 16
  for (int g = 0; g < 16; ++g) {
    const __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(&round_k[4 * g]));
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      __m128i x;
      if (g < 4) {
        x = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block[i] + 16 * g)),
                             bswap);
      } else {
        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time: msg1 adds
        // s0 of the group three back to the group four back, alignr supplies W[t-7], msg2
        // adds s1 of the two before.
        __m128i t = _mm_sha256msg1_epu32(w[i][g & 3], w[i][(g + 1) & 3]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[i][(g + 3) & 3], w[i][(g + 2) & 3], 4));
        x = _mm_sha256msg2_epu32(t, w[i][(g + 3) & 3]);
      }
      w[i][g & 3] = x;
      __m128i kw = _mm_add_epi32(x, k);
      s[i].cdgh = _mm_sha256rnds2_epu32(s[i].cdgh, s[i].abef, kw);  // now the new abef
      kw = _mm_shuffle_epi32(kw, 0x0E);
      s[i].abef = _mm_sha256rnds2_epu32(s[i].abef, s[i].cdgh, kw);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) {
    s[i].abef = _mm_add_epi32(s[i].abef, start[i].abef);
    s[i].cdgh = _mm_add_epi32(s[i].cdgh, start[i].cdgh);
  }
}

template <int N>
inline void hash_n(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  lane_state s[N];
  const lane_state start = to_lanes(j.start);
  for (int i = 0; i < N; ++i)
    s[i] = start;
  const std::uint8_t* block[N];
  for (std::size_t b = 0; b < j.blocks; ++b) {
    for (int i = 0; i < N; ++i)
      block[i] = msgs[i] + 64 * b;
    compress<N>(s, block);
  }
  if (j.tail) {
    for (int i = 0; i < N; ++i)
      block[i] = j.tail;
    compress<N>(s, block);
  }
  for (int i = 0; i < N; ++i)
    store_digest(s[i], out + 32 * i);
}

}  // namespace

void shani_x1(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  hash_n<1>(j, msgs, out);
}
void shani_x2(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  hash_n<2>(j, msgs, out);
}
void shani_x4(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  hash_n<4>(j, msgs, out);
}

}  // namespace quiesce::verity::detail::sha256
