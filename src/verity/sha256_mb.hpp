// SPDX-License-Identifier: Apache-2.0
// Multi-buffer SHA-256: N messages of one length hashed in one call by the fastest kernel
// this CPU runs - SHA-NI one, two or four messages interleaved, AVX2 eight lanes,
// AVX-512 sixteen lanes, or the portable one - chosen at first use by CPUID and a short
// calibration, beside OpenSSL's single-stream SHA-256 (which wins when no kernel beats it,
// and then is used instead). Not installed; `quiesce info` shows the choice.
//
// Threads: everything here may be called from any thread; the calibration runs once
// (a function-local static) and is immutable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sha256_kernels.hpp"

namespace quiesce::verity::detail::sha256 {

// One kernel: its name ("shani-x2"), how many messages a call hashes, and whether and why
// not this CPU (and its kernel) runs it.
struct variant {
  const char* name;
  unsigned lanes;
  kernel_fn fn;
  const char* needs;  // the instruction sets, for "not here" messages
  bool runs_here;
};

// Every kernel quiesce has, in order of width; `runs_here` from CPUID (and XGETBV: the
// kernel must save the registers).
const std::vector<variant>& variants();
const variant* find_variant(const std::string& name);  // nullptr if none is so named

// The start-up measurement: each runnable kernel's (and OpenSSL's) throughput on 4 KiB
// messages in MB/s, and what was chosen.
struct calibration {
  struct row {
    std::string name;
    unsigned lanes;
    double mb_per_s;       // 0 when it does not run here
    std::string not_here;  // why it does not run here, or empty
  };
  std::vector<row> rows;  // OpenSSL first, then the kernels
  const variant* chosen;  // nullptr: OpenSSL's single stream is used
  std::string why;        // "fastest of N measured", or "QUIESCE_SHA256=..."
};
// Measured once, at first use (a few milliseconds). QUIESCE_SHA256=<name|openssl> in the
// environment forces the choice (if this CPU runs it; else the measurement decides and
// `why` says the request was ignored).
const calibration& calibrated();

// A prefix already absorbed (fs-verity's zero-padded salt), as a chaining value.
struct prefix_state {
  std::uint32_t h[8];
  std::uint64_t bytes;  // a multiple of 64
};
// The state after `prefix` zero-padded to a multiple of 64 bytes.
prefix_state absorb_padded(const std::uint8_t* prefix, std::size_t size);

// Writes SHA-256(prefix || msgs[i]) to out + 32 * i for i < n; each message is `len`
// bytes, a multiple of 64. Uses `v` (full calls) and the cheapest kernels for the rest;
// v == nullptr means calibrated().chosen, which must then not be OpenSSL.
void hash_many(const prefix_state& prefix, const std::uint8_t* const* msgs, std::size_t n,
               std::size_t len, std::uint8_t* out, const variant* v = nullptr);

}  // namespace quiesce::verity::detail::sha256
