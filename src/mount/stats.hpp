// SPDX-License-Identifier: Apache-2.0
// The mount's counters (internal to src/mount): per source inode, the verified reads, bytes
// and EIO replies; for the mount, plain reads. `--stats FILE` (-o stats=FILE) writes them,
// with the verification queue's queue->start percentiles, as one JSON object, every second
// while the mount serves and once more at its end (write, then rename: a reader never sees
// half a file).
//
// Protection legend: I (set before the counters are shared), A (atomic, relaxed: counters
// read only for reporting), L(lock).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "../base/mutex.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::mount::detail {

// One source inode's reads through the mount.
struct file_counters {
  file_counters(dev_t d, ino_t i, std::string p) : dev(d), ino(i), path(std::move(p)) {}
  const dev_t dev;
  const ino_t ino;
  const std::string path;                        // I: relative to SOURCE, when first opened
  std::atomic<std::uint64_t> verified_reads{0};  // A: replies with verified bytes
  std::atomic<std::uint64_t> verified_bytes{0};  // A
  std::atomic<std::uint64_t> eio{0};             // A: reads refused, a block failed
};

class mount_stats {
 public:
  // The counters of inode (dev, ino), made at its first open under `path`; they live as long
  // as the mount (a pointer to them stays valid).
  file_counters& of(dev_t dev, ino_t ino, const std::string& path);
  void plain_read() noexcept { plain_reads_.fetch_add(1, std::memory_order_relaxed); }

  // Everything, with `verify`'s queue->start percentiles (microseconds).
  nlohmann::json snapshot(const workqueue& verify) const;
  // Writes snapshot() to `file` (through FILE.tmp and a rename). Throws std::system_error.
  void write(const std::filesystem::path& file, const workqueue& verify) const;

 private:
  mutable quiesce::detail::mutex lock_{"mount stats"};
  std::map<std::pair<dev_t, ino_t>, std::unique_ptr<file_counters>> files_
      QUIESCE_GUARDED_BY(lock_);
  std::atomic<std::uint64_t> plain_reads_{0};  // A
};

}  // namespace quiesce::mount::detail
