// SPDX-License-Identifier: Apache-2.0
// The multi-buffer SHA-256 kernels' common interface: one job hashes `lanes` messages of
// the same length at once. Not installed.
//
// Each kernel lives in a file of its own, compiled with the instruction set it needs
// (-msha, -mavx2, -mavx512f ...), and is only called after the CPU was checked for it
// (sha256_mb.cpp). So this header and the kernel files include nothing but C headers and
// <immintrin.h>: an inline function of the standard library instantiated in such a file
// could be merged by the linker into code that runs on any CPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quiesce::verity::detail::sha256 {

// What every lane of a job shares: the chaining value to start from (after a common
// prefix, e.g. fs-verity's padded salt), how many 64-byte blocks each message has, and
// one final block appended to every message (the padding: all lanes have the same total
// length, so the same padding block), or nullptr for none.
struct job {
  const std::uint32_t* start;  // 8 words, a..h
  std::size_t blocks;          // 64-byte blocks of each message
  const std::uint8_t* tail;    // 64 bytes, or nullptr
};

// Hashes `lanes` messages (msgs[i], job.blocks * 64 bytes each, then job.tail) and
// writes each digest (32 bytes, big-endian words) to out + 32 * i.
using kernel_fn = void (*)(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);

// The round constants, FIPS 180-4 section 4.2.2.
alignas(64) inline constexpr std::uint32_t round_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// The kernels (each defined in its own file; call only where the CPU has what it needs).
void scalar_x1(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);  // any CPU
void shani_x1(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);   // SHA-NI
void shani_x2(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);
void shani_x4(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);
void avx2_x8(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);     // AVX2
void avx512_x16(const job& j, const std::uint8_t* const* msgs, std::uint8_t* out);  // AVX-512F+BW

// Advances `state` (8 words) over `blocks` 64-byte blocks at `data`: the portable
// compression function, for prefixes (the salt) and as the reference.
void compress_scalar(std::uint32_t* state, const std::uint8_t* data, std::size_t blocks);

}  // namespace quiesce::verity::detail::sha256
