// SPDX-License-Identifier: Apache-2.0
// fs-verity verification throughput (the per-worker target): how fast a verification
// worker checks sequential reads, against one core's plain OpenSSL SHA-256 of 4 KiB buffers
// (what `openssl speed -evp sha256 -bytes 4096` measures), both measured in this process.
// Run: build/release/bin/bench_verity (or ./quiesce bench).
//
//  - BM_openssl_sha256: EVP_Digest() of one 4 KiB buffer per call - the baseline.
//  - BM_block_hasher: the salted block hasher, one block per call (OpenSSL).
//  - BM_sha256_kernel/<kernel>: each multi-buffer SHA-256 kernel alone, 64 blocks a call.
//  - BM_build_tree: a 64 MiB Merkle tree in memory with the SHA-256 chosen at start-up
//    (label; QUIESCE_SHA256=<kernel|openssl> forces one): bytes_per_second against the
//    counter sha256_MBps, OpenSSL's single stream measured in the same run.
//  - BM_verified_sequential/<bio KiB>: a 64 MiB file (page cache) read start to end through
//    verified_file, verification on a bound high-priority queue (the kernel's
//    fsverity_read_queue since the patch). Counters: bytes_per_second end to end (reader's
//    pread + copy + the wait included); worker_MBps = verified bytes / the time the workers
//    spent verifying; worker_pct_of_sha256 = that against BM_openssl_sha256's rate, which is
//    measured again inside the benchmark (same sizes, same moment) for the ratio.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "hasher.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/host/temp_dir.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace {

namespace fs = std::filesystem;
namespace verity = quiesce::verity;

constexpr std::size_t block_size = 4096;

std::vector<std::uint8_t> random_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const std::uint64_t x = rng();
    std::copy_n(reinterpret_cast<const std::uint8_t*>(&x), 8, v.begin() + static_cast<long>(i));
  }
  return v;
}

// Bytes per second of EVP_Digest(SHA-256) over 4 KiB buffers, for at least `min_ns`.
double openssl_sha256_rate(std::uint64_t min_ns) {
  const auto buf = random_bytes(block_size);
  std::uint8_t out[EVP_MAX_MD_SIZE];
  std::uint64_t n = 0;
  const std::uint64_t t0 = quiesce::thread_cpu_ns();
  std::uint64_t t = t0;
  while (t - t0 < min_ns) {
    for (int i = 0; i < 256; ++i, ++n)
      EVP_Digest(buf.data(), buf.size(), out, nullptr, EVP_sha256(), nullptr);
    t = quiesce::thread_cpu_ns();
  }
  return static_cast<double>(n * block_size) * 1e9 / static_cast<double>(t - t0);
}

void BM_openssl_sha256(benchmark::State& state) {
  const auto buf = random_bytes(block_size);
  std::uint8_t out[EVP_MAX_MD_SIZE];
  for (auto _ : state) {
    EVP_Digest(buf.data(), buf.size(), out, nullptr, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * block_size));
}
BENCHMARK(BM_openssl_sha256);

void BM_block_hasher(benchmark::State& state) {
  verity::params p;
  if (state.range(0)) p.salt = {1, 2, 3, 4, 5, 6, 7, 8};
  verity::detail::block_hasher h(p);
  const auto buf = random_bytes(block_size);
  std::uint8_t out[EVP_MAX_MD_SIZE];
  for (auto _ : state) {
    if (!h.hash(buf.data(), buf.size(), out)) {
      state.SkipWithError("libcrypto failed to hash a block");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * block_size));
}
BENCHMARK(BM_block_hasher)->ArgName("salted")->Arg(0)->Arg(1);

// One multi-buffer SHA-256 kernel (sha256_mb.hpp) alone: 64 blocks of 4 KiB per call
// batch, as the tree builder hands them over. A kernel this CPU cannot run is skipped.
void BM_sha256_kernel(benchmark::State& state, const std::string& name) {
  namespace sha = verity::detail::sha256;
  const sha::variant* v = sha::find_variant(name);
  if (!v || !v->runs_here) {
    state.SkipWithError(v ? (name + ": this CPU lacks " + v->needs).c_str() : "no such kernel");
    return;
  }
  constexpr std::size_t n = 64;
  const auto data = random_bytes(n * block_size);
  std::vector<const std::uint8_t*> msgs(n);
  for (std::size_t i = 0; i < n; ++i)
    msgs[i] = &data[i * block_size];
  std::vector<std::uint8_t> out(32 * n);
  const sha::prefix_state start = sha::absorb_padded(nullptr, 0);
  for (auto _ : state) {
    sha::hash_many(start, msgs.data(), n, block_size, out.data(), v);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * block_size));
}

// A Merkle tree of 64 MiB in memory (4 KiB blocks, SHA-256): what `verity digest` does per
// core, with the SHA-256 this process chose (QUIESCE_SHA256 forces one). pct_of_sha256:
// against OpenSSL's single stream over the same blocks, measured in the benchmark.
void BM_build_tree(benchmark::State& state) {
  static const auto data = random_bytes(64u << 20);
  for (auto _ : state) {
    const verity::merkle_tree t = verity::build_tree(data.data(), data.size(), verity::params{});
    benchmark::DoNotOptimize(t.root_hash.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * data.size()));
  state.counters["sha256_MBps"] = openssl_sha256_rate(200'000'000) / 1e6;
  state.SetLabel(verity::sha256_hashing().chosen);
}
BENCHMARK(BM_build_tree)->Unit(benchmark::kMillisecond)->UseRealTime();

// A 64 MiB file and its sidecar, made once, in a private temporary directory (removed on
// every way out): benchmark runs side by side - two tests that run `bench peers` at once -
// must not write, enable or remove each other's file, as a fixed name made them do.
struct test_file {
  quiesce::host::temp_dir dir{"bench-verity"};
  fs::path path = dir.path() / "file.bin";
  std::uint64_t size = 64ull << 20;
  test_file() {
    const auto chunk = random_bytes(1 << 20);
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    for (std::uint64_t i = 0; i < size; i += chunk.size())
      o.write(reinterpret_cast<const char*>(chunk.data()), static_cast<long>(chunk.size()));
    o.close();
    verity::enable(path, verity::params{});
  }
};

void BM_verified_sequential(benchmark::State& state) {
  static test_file file;
  const std::size_t bio = static_cast<std::size_t>(state.range(0)) << 10;
  std::vector<std::uint8_t> buf(bio);
  quiesce::workqueue wq("fsverity_read_queue", quiesce::wq_options{.highpri = true});
  std::uint64_t verified_bytes = 0, worker_ns = 0;
  for (auto _ : state) {
    state.PauseTiming();
    // A fresh bitmap per pass: every climb happens. The file is the one made above.
    verity::verified_file v(file.path, wq, verity::trust_policy::integrity());
    state.ResumeTiming();
    for (std::uint64_t off = 0; off < v.size();)
      off += v.read(off, buf);
    const verity::read_stats s = v.stats();
    verified_bytes += s.blocks_verified * block_size;
    worker_ns += s.verify_ns;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * file.size));
  const double worker_rate = static_cast<double>(verified_bytes) * 1e9 /
                             static_cast<double>(std::max<std::uint64_t>(worker_ns, 1));
  const double sha_rate = openssl_sha256_rate(200'000'000);
  state.counters["worker_MBps"] = worker_rate / 1e6;
  state.counters["sha256_MBps"] = sha_rate / 1e6;
  state.counters["worker_pct_of_sha256"] = 100.0 * worker_rate / sha_rate;
}
BENCHMARK(BM_verified_sequential)
    ->ArgName("bio_kib")
    ->Arg(16)
    ->Arg(128)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  for (const auto& v : verity::detail::sha256::variants()) {
    benchmark::RegisterBenchmark(("BM_sha256_kernel/" + std::string(v.name)).c_str(),
                                 BM_sha256_kernel, std::string(v.name));
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
