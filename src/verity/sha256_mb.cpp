// SPDX-License-Identifier: Apache-2.0
// Multi-buffer SHA-256: which kernels this CPU runs, the start-up calibration that picks
// one, and the batching of N messages into the kernels' calls.
#include "sha256_mb.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../base/die.hpp"
#include "hasher.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace quiesce::verity::detail::sha256 {

namespace {

struct cpu_features {
  bool ssse3 = false, sse41 = false, sha = false, avx2 = false, avx512 = false;
};

// CPUID says what the CPU has; XGETBV what the kernel saves on a context switch (AVX state
// for ymm, opmask and zmm state for AVX-512).
cpu_features detect() {
  cpu_features f;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.ssse3 = c & (1u << 9);
  f.sse41 = c & (1u << 19);
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  std::uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = std::uint64_t{hi} << 32 | lo;
  }
  const bool ymm_saved = (xcr0 & 0x6) == 0x6, zmm_saved = (xcr0 & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.sha = f.ssse3 && f.sse41 && (b & (1u << 29));
  f.avx2 = avx && ymm_saved && (b & (1u << 5));
  f.avx512 = f.avx2 && zmm_saved && (b & (1u << 16)) && (b & (1u << 30));  // F and BW
#endif
  return f;
}

std::vector<variant> make_variants() {
  const cpu_features f = detect();
#if !defined(__x86_64__)
  (void)f;
  return {{"scalar-x1", 1, scalar_x1, "nothing", true}};
#else
  return {
      {"scalar-x1", 1, scalar_x1, "nothing", true},
      {"shani-x1", 1, shani_x1, "SHA-NI, SSE4.1", f.sha},
      {"shani-x2", 2, shani_x2, "SHA-NI, SSE4.1", f.sha},
      {"shani-x4", 4, shani_x4, "SHA-NI, SSE4.1", f.sha},
      {"avx2-x8", 8, avx2_x8, "AVX2", f.avx2},
      {"avx512-x16", 16, avx512_x16, "AVX-512F and BW", f.avx512},
  };
#endif
}

constexpr std::uint32_t initial_state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// The padding block of a message whose total length is a multiple of 64: 0x80, zeros,
// the length in bits (big-endian).
void padding_block(std::uint64_t total_bytes, std::uint8_t (&block)[64]) {
  std::memset(block, 0, sizeof block);
  block[0] = 0x80;
  const std::uint64_t bits = total_bytes * 8;
  for (int i = 0; i < 8; ++i)
    block[63 - i] = static_cast<std::uint8_t>(bits >> (8 * i));
}

// Calibration: `messages` 4 KiB messages, each kernel's best of `rounds` timings
// (interleaved, so a noisy moment hurts every kernel alike).
constexpr std::size_t calib_len = 4096, calib_messages = 32;
constexpr int calib_rounds = 5;

using clock_type = std::chrono::steady_clock;

double mb_per_s(std::size_t bytes, clock_type::duration best) {
  const double s = std::chrono::duration<double>(best).count();
  return s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0;
}

calibration measure() {
  calibration c;
  const std::vector<variant>& vs = variants();
  std::vector<std::uint8_t> data(calib_len * calib_messages);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<std::uint8_t>(i * 131 + 7);
  std::vector<const std::uint8_t*> msgs(calib_messages);
  for (std::size_t i = 0; i < calib_messages; ++i)
    msgs[i] = &data[i * calib_len];
  std::vector<std::uint8_t> out(calib_messages * 32);
  std::uint8_t tail[64];
  padding_block(calib_len, tail);
  const job j{initial_state, calib_len / 64, tail};

  init_crypto();
  const std::unique_ptr<EVP_MD_CTX, ctx_deleter> ctx(EVP_MD_CTX_new());
  auto time_openssl = [&] {
    const auto began = clock_type::now();
    for (std::size_t i = 0; i < calib_messages; ++i) {
      unsigned len = 0;
      if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
          EVP_DigestUpdate(ctx.get(), msgs[i], calib_len) != 1 ||
          EVP_DigestFinal_ex(ctx.get(), &out[32 * i], &len) != 1) {
        return clock_type::duration::max();  // OpenSSL cannot: never chosen
      }
    }
    return clock_type::now() - began;
  };
  auto time_kernel = [&](const variant& v) {
    const auto began = clock_type::now();
    for (std::size_t i = 0; i < calib_messages; i += v.lanes)
      v.fn(j, &msgs[i], &out[32 * i]);
    return clock_type::now() - began;
  };
  std::vector<clock_type::duration> best(vs.size() + 1, clock_type::duration::max());
  for (int r = 0; r < calib_rounds; ++r) {
    best[0] = std::min(best[0], time_openssl());
    for (std::size_t k = 0; k < vs.size(); ++k)
      if (vs[k].runs_here) best[k + 1] = std::min(best[k + 1], time_kernel(vs[k]));
  }
  const std::size_t bytes = calib_len * calib_messages;
  c.rows.push_back(
      {"openssl", 1, best[0] == clock_type::duration::max() ? 0 : mb_per_s(bytes, best[0]), ""});
  std::size_t fastest = 0;  // 0: OpenSSL
  for (std::size_t k = 0; k < vs.size(); ++k) {
    const bool runs = vs[k].runs_here;
    c.rows.push_back({vs[k].name, vs[k].lanes, runs ? mb_per_s(bytes, best[k + 1]) : 0,
                      runs ? "" : fmt::format("needs {}", vs[k].needs)});
    if (runs && best[k + 1] < best[fastest]) fastest = k + 1;
  }
  c.chosen = fastest == 0 ? nullptr : &vs[fastest - 1];
  c.why = fmt::format("the fastest of {} measured",
                      std::count_if(c.rows.begin(), c.rows.end(),
                                    [](const calibration::row& r) { return r.mb_per_s > 0; }));
  if (const char* want = std::getenv("QUIESCE_SHA256"); want && *want) {
    const variant* v = find_variant(want);
    if (std::string_view(want) == "openssl") {
      c.chosen = nullptr;
      c.why = "QUIESCE_SHA256=openssl";
    } else if (v && v->runs_here) {
      c.chosen = v;
      c.why = fmt::format("QUIESCE_SHA256={}", want);
    } else {
      c.why += fmt::format("; QUIESCE_SHA256={} ignored: {}", want,
                           v ? fmt::format("this CPU lacks {}", v->needs) : "no such variant");
    }
  }
  return c;
}

// The measured speed of a kernel (MB/s of message bytes), for the remainder's choice.
double speed_of(const variant& v) {
  for (const calibration::row& r : calibrated().rows)
    if (r.name == v.name) return r.mb_per_s;
  return 0;
}

// For `left` messages (fewer than the main kernel's lanes): the kernel whose call costs
// least per message actually hashed (a wider call's spare lanes are wasted work).
const variant& cheapest_for(std::size_t left) {
  const variant* best = &variants().front();  // scalar-x1 always runs
  double best_cost = 0;
  for (const variant& v : variants()) {
    const double speed = speed_of(v);
    if (!v.runs_here || speed <= 0) continue;
    const double used = static_cast<double>(std::min<std::size_t>(left, v.lanes));
    const double cost = static_cast<double>(v.lanes) / speed / used;
    if (best_cost == 0 || cost < best_cost) {
      best = &v;
      best_cost = cost;
    }
  }
  return *best;
}

}  // namespace

const std::vector<variant>& variants() {
  static const std::vector<variant> all = make_variants();
  return all;
}

const variant* find_variant(const std::string& name) {
  for (const variant& v : variants())
    if (name == v.name) return &v;
  return nullptr;
}

const calibration& calibrated() {
  static const calibration c = measure();
  return c;
}

prefix_state absorb_padded(const std::uint8_t* prefix, std::size_t size) {
  prefix_state s;
  std::copy(std::begin(initial_state), std::end(initial_state), s.h);
  s.bytes = (size + 63) / 64 * 64;
  std::uint8_t block[64];
  for (std::size_t done = 0; done < size; done += 64) {
    std::memset(block, 0, sizeof block);
    std::memcpy(block, prefix + done, std::min<std::size_t>(64, size - done));
    compress_scalar(s.h, block, 1);
  }
  return s;
}

void hash_many(const prefix_state& prefix, const std::uint8_t* const* msgs, std::size_t n,
               std::size_t len, std::uint8_t* out, const variant* v) {
  if (!v) v = calibrated().chosen;
  if (!v || !v->runs_here || len % 64 != 0) {
    quiesce::detail::die("sha256::hash_many: %s", !v ? "no kernel chosen (OpenSSL is)"
                                                  : !v->runs_here
                                                      ? "kernel does not run on this CPU"
                                                      : "length not a multiple of 64");
  }
  std::uint8_t tail[64];
  padding_block(mutant::verity_mb_length_unsalted ? len : prefix.bytes + len, tail);
  const job j{prefix.h, len / 64, tail};
  std::size_t i = 0;
  for (; i + v->lanes <= n; i += v->lanes)
    v->fn(j, msgs + i, out + 32 * i);
  while (i < n) {  // the rest: fewer than v's lanes
    const std::size_t left = n - i;
    const variant& r = cheapest_for(left);
    if (left >= r.lanes) {
      r.fn(j, msgs + i, out + 32 * i);
      i += r.lanes;
      continue;
    }
    // A wider call than messages left: the spare lanes hash the last message again.
    const std::uint8_t* padded[16];
    std::uint8_t scratch[16 * 32];
    for (std::size_t k = 0; k < r.lanes; ++k)
      padded[k] = msgs[std::min(i + k, n - 1)];
    r.fn(j, padded, scratch);
    std::memcpy(out + 32 * i, scratch, 32 * left);
    i = n;
  }
}

}  // namespace quiesce::verity::detail::sha256

namespace quiesce::verity {

const sha256_choice& sha256_hashing() {
  static const sha256_choice c = [] {
    const detail::sha256::calibration& cal = detail::sha256::calibrated();
    sha256_choice out;
    for (const auto& r : cal.rows)
      out.rows.push_back({r.name, r.lanes, r.mb_per_s, r.not_here});
    out.chosen = cal.chosen ? cal.chosen->name : "openssl";
    out.why = cal.why;
    return out;
  }();
  return c;
}

}  // namespace quiesce::verity
