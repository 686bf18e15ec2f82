// SPDX-License-Identifier: Apache-2.0
// The runtime-vs-peers comparison (`quiesce bench peers`, and the report's section): runs
// the Google Benchmark programs built beside the CLI (bench_wq against oneTBB, Boost.Asio
// and a mutex+condvar pool; bench_rcu against liburcu memb and qsbr; bench_verity's SHA-256
// implementations against OpenSSL) with repetitions,
// reads their JSON output, and compares quiesce with each peer per metric - medians, the
// spread of the repetitions, and the ratio to the best peer - plus how quiesce's own cost
// grows with the amount of work. Results are typed; Markdown and JSON are renderings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quiesce/experiments/plot.hpp"
#include "quiesce/experiments/verdict.hpp"

namespace quiesce::experiments {

// One runtime's repetitions of one measurement.
struct sample_set {
  std::string runtime;         // "quiesce", "mutex+condvar", "oneTBB", "liburcu memb", ...
  std::vector<double> values;  // one per repetition, in the row's unit
  double median() const;
  double min() const;
  double max() const;
};

// What a row must show. Most rows: quiesce at least `ratio` times as good as the best peer.
// A row about a bound quiesce keeps whatever the peers do (memory under a retire flood, a
// latency ceiling) sets `at_most` instead: every repetition of quiesce at most that, in the
// row's unit.
struct row_goal {
  double ratio = 1.0;
  std::optional<double> at_most;
  std::string why;  // where an `at_most` comes from ("the callback limit"), or empty
  // ">= 1x", ">= 10x", "<= 200 (...)"
  std::string text() const;
};

// One metric, quiesce beside every peer measured for it.
struct peer_row {
  std::string metric;
  std::string unit;  // "M items/s", "us", "ns"
  better direction = better::higher;
  sample_set ours;
  std::vector<sample_set> peers;
  row_goal goal;
  // The peer with the best median.
  const sample_set& best_peer() const;
  // How quiesce's median compares with the best peer's: >= 1 means at least as good
  // (throughput ours / theirs; latency and cost theirs / ours).
  double ratio() const;
  bool meets_goal() const;
};

// quiesce alone: throughput of N items from one thread.
struct scaling_row {
  std::string queue;  // "bound" or "unbound"
  std::int64_t items = 0;
  sample_set throughput;  // M items/s
};

// quiesce alone: queue-to-start of every item of a burst of `queued` items.
struct burst_row {
  std::int64_t queued = 0;
  sample_set p50, p99, max;  // us
};

// fs-verity hashing on one core with one SHA-256 implementation (bench_verity, run once per
// implementation with QUIESCE_SHA256 set), against OpenSSL's single stream measured in the
// same run. MB/s of data hashed.
struct hashing_row {
  std::string sha256;  // "openssl", "shani-x2", "avx512-x16", ...
  unsigned lanes = 1;
  sample_set alone;             // the implementation alone on 4 KiB blocks
  sample_set tree;              // a 64 MiB Merkle tree built in memory
  sample_set verify;            // a verification worker's throughput (sequential 1 MiB reads)
  sample_set openssl;           // OpenSSL's SHA-256 of 4 KiB buffers, in the same process
  double tree_ratio() const;    // tree / openssl (medians)
  double verify_ratio() const;  // verify / openssl
};

struct peers_result {
  int repetitions = 0;
  int size_divisor = 1;  // peers_options::size_divisor: above 1 the figures measure nothing
  std::vector<peer_row> rows;
  std::vector<scaling_row> scaling;          // empty when not asked for
  std::vector<burst_row> bursts;             // empty when not asked for
  std::vector<hashing_row> hashing;          // each SHA-256 implementation measured
  std::string sha256_chosen;                 // what this machine uses, and why
  std::vector<std::string> sha256_not_here;  // "avx512-x16 (needs AVX-512F and BW)"
  std::vector<std::string> sha256_left_out;  // runnable, not measured (every_sha256 off)
  std::string hashing_skipped;               // why there is no hashing table, or empty
  double seconds = 0;                        // wall time of the whole run

  nlohmann::json to_json() const;
  std::string markdown() const;
  // quiesce against the best peer per metric (one bar each, the goal line at 1), and, when
  // measured, how quiesce's throughput grows with the number of items.
  std::vector<plot_spec> plots() const;
};

struct peers_options {
  int repetitions = 5;
  bool growth = true;         // also the scaling and burst tables
  bool every_sha256 = true;   // false: only OpenSSL and the chosen SHA-256 (quicker)
  double min_time_s = 0.1;    // each benchmark's --benchmark_min_time
  double flood_seconds = 10;  // the retire flood's length (bench_rcu's QUIESCE_FLOOD_SECONDS)
  // bench_wq's fixed sizes (items, posts, round trips) divided by this (its
  // QUIESCE_BENCH_DIVISOR, 1..1000): above 1, a check that every row runs (--smoke), whose
  // figures measure nothing.
  int size_divisor = 1;
  std::filesystem::path bench_dir;  // empty: the directory of this executable
};

// A smoke run's options (`quiesce bench peers --smoke`, `quiesce report --smoke`): the
// ratio table only, OpenSSL and the chosen SHA-256 only, the shortest benchmark times, a
// 0.2 s retire flood and bench_wq's sizes divided by 20 - every row runs, in a few seconds,
// and its figures measure nothing. The repetitions and the benchmark directory are kept.
void make_smoke(peers_options& options);

// Why the comparison cannot run here (a benchmark program is not built: QUIESCE_BUILD_BENCH
// off), or empty if it can.
std::string peers_unavailable(const peers_options& options);

// Runs the benchmarks and builds the table. Throws std::runtime_error naming the program
// when a benchmark program is missing, fails, or lacks a measurement the table needs.
peers_result run_peers(const peers_options& options);

}  // namespace quiesce::experiments
