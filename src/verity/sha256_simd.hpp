// SPDX-License-Identifier: Apache-2.0
// The SIMD multi-buffer SHA-256 kernel: one message per 32-bit lane of a vector register
// (8 with AVX2, 16 with AVX-512), all 64 rounds computed for every lane at once. Included
// only by the kernel files, each compiled for its instruction set with its own vector
// type `V`; everything here is in an unnamed namespace so that no two instruction sets'
// copies are ever merged. Not installed.
//
// V provides: `reg`, `lanes`, set1, add, xor3, ror<n>, shr<n>, ch, maj, and
// load_words(msgs, offset, w[16]) - the 16 big-endian words at msgs[i] + offset of every
// lane i, transposed so that w[t] holds word t of each lane.
#pragma once

#include "sha256_kernels.hpp"

namespace quiesce::verity::detail::sha256 {
namespace {

template <class V>
struct simd_sha256 {
  using reg = typename V::reg;

  static reg big_sigma0(reg a) {
    return V::xor3(V::template ror<2>(a), V::template ror<13>(a), V::template ror<22>(a));
  }
  static reg big_sigma1(reg e) {
    return V::xor3(V::template ror<6>(e), V::template ror<11>(e), V::template ror<25>(e));
  }
  static reg small_sigma0(reg x) {
    return V::xor3(V::template ror<7>(x), V::template ror<18>(x), V::template shr<3>(x));
  }
  static reg small_sigma1(reg x) {
    return V::xor3(V::template ror<17>(x), V::template ror<19>(x), V::template shr<10>(x));
  }

  // One round; the caller rotates the names (the old h becomes the new a, ...).
  static void round(reg a, reg b, reg c, reg& d, reg e, reg f, reg g, reg& h, reg kw) {
    const reg t1 = V::add(V::add(h, big_sigma1(e)), V::add(V::ch(e, f, g), kw));
    d = V::add(d, t1);
    h = V::add(t1, V::add(big_sigma0(a), V::maj(a, b, c)));
  }

  // 64 rounds over the 16 words in `w` (overwritten by the schedule), added into `s`.
  static void compress(reg (&s)[8], reg (&w)[16]) {
    reg a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
#pragma GCC unroll 8
    for (int t = 0; t < 64; t += 8) {
      if (t >= 16) {
#pragma GCC unroll 8
        for (int i = t; i < t + 8; ++i) {
          w[i & 15] = V::add(V::add(w[i & 15], small_sigma0(w[(i - 15) & 15])),
                             V::add(w[(i - 7) & 15], small_sigma1(w[(i - 2) & 15])));
        }
      }
      round(a, b, c, d, e, f, g, h, V::add(w[(t + 0) & 15], V::set1(round_k[t + 0])));
      round(h, a, b, c, d, e, f, g, V::add(w[(t + 1) & 15], V::set1(round_k[t + 1])));
      round(g, h, a, b, c, d, e, f, V::add(w[(t + 2) & 15], V::set1(round_k[t + 2])));
      round(f, g, h, a, b, c, d, e, V::add(w[(t + 3) & 15], V::set1(round_k[t + 3])));
      round(e, f, g, h, a, b, c, d, V::add(w[(t + 4) & 15], V::set1(round_k[t + 4])));
      round(d, e, f, g, h, a, b, c, V::add(w[(t + 5) & 15], V::set1(round_k[t + 5])));
      round(c, d, e, f, g, h, a, b, V::add(w[(t + 6) & 15], V::set1(round_k[t + 6])));
      round(b, c, d, e, f, g, h, a, V::add(w[(t + 7) & 15], V::set1(round_k[t + 7])));
    }
    s[0] = V::add(s[0], a);
    s[1] = V::add(s[1], b);
    s[2] = V::add(s[2], c);
    s[3] = V::add(s[3], d);
    s[4] = V::add(s[4], e);
    s[5] = V::add(s[5], f);
    s[6] = V::add(s[6], g);
    s[7] = V::add(s[7], h);
  }

  static void hash(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
    reg s[8], w[16];
    for (int i = 0; i < 8; ++i)
      s[i] = V::set1(j.start[i]);
    for (std::size_t b = 0; b < j.blocks; ++b) {
      V::load_words(msgs, 64 * b, w);
      compress(s, w);
    }
    if (j.tail) {  // the same block for every lane
      for (int t = 0; t < 16; ++t) {
        const std::uint8_t* p = j.tail + 4 * t;
        w[t] = V::set1(std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 |
                       std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]});
      }
      compress(s, w);
    }
    // Once per message: spill and write each lane's digest big-endian.
    alignas(64) std::uint32_t words[8][V::lanes];
    for (int i = 0; i < 8; ++i)
      V::store(words[i], s[i]);
    for (int lane = 0; lane < V::lanes; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const std::uint32_t v = words[i][lane];
        std::uint8_t* p = out + 32 * lane + 4 * i;
        p[0] = static_cast<std::uint8_t>(v >> 24);
        p[1] = static_cast<std::uint8_t>(v >> 16);
        p[2] = static_cast<std::uint8_t>(v >> 8);
        p[3] = static_cast<std::uint8_t>(v);
      }
    }
  }
};

}  // namespace
}  // namespace quiesce::verity::detail::sha256
