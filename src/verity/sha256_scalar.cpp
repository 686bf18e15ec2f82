// SPDX-License-Identifier: Apache-2.0
// The portable SHA-256 compression function (FIPS 180-4) and the one-lane scalar kernel:
// the reference the SIMD kernels are tested against, and what prefixes are hashed with.
#include "sha256_kernels.hpp"

namespace quiesce::verity::detail::sha256 {

namespace {

constexpr std::uint32_t ror(std::uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

std::uint32_t load_be(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 |
         std::uint32_t{p[3]};
}

void store_be(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 24);
  p[1] = static_cast<std::uint8_t>(v >> 16);
  p[2] = static_cast<std::uint8_t>(v >> 8);
  p[3] = static_cast<std::uint8_t>(v);
}

void compress_one(std::uint32_t* s, const std::uint8_t* block) {
  std::uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = load_be(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t t1 =
        h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + round_k[t] + w[t];
    const std::uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  s[0] += a;
  s[1] += b;
  s[2] += c;
  s[3] += d;
  s[4] += e;
  s[5] += f;
  s[6] += g;
  s[7] += h;
}

}  // namespace

void compress_scalar(std::uint32_t* state, const std::uint8_t* data, std::size_t blocks) {
  for (std::size_t i = 0; i < blocks; ++i)
    compress_one(state, data + 64 * i);
}

void scalar_x1(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out) {
  std::uint32_t s[8];
  for (int i = 0; i < 8; ++i)
    s[i] = j.start[i];
  compress_scalar(s, msgs[0], j.blocks);
  if (j.tail) compress_one(s, j.tail);
  for (int i = 0; i < 8; ++i)
    store_be(out + 4 * i, s[i]);
}

}  // namespace quiesce::verity::detail::sha256
