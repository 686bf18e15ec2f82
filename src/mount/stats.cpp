// SPDX-License-Identifier: Apache-2.0
// The mount's counters and their JSON (stats.hpp).
#include "stats.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>
#include <vector>

namespace quiesce::mount::detail {

file_counters& mount_stats::of(dev_t dev, ino_t ino, const std::string& path) {
  quiesce::detail::lock_guard g(lock_);
  auto& slot = files_[{dev, ino}];
  if (!slot) slot = std::make_unique<file_counters>(dev, ino, path);
  return *slot;
}

nlohmann::json mount_stats::snapshot(const workqueue& verify) const {
  nlohmann::json files = nlohmann::json::array();
  std::uint64_t reads = 0, bytes = 0, eio = 0;
  {
    quiesce::detail::lock_guard g(lock_);
    for (const auto& [key, c] : files_) {
      const std::uint64_t r = c->verified_reads.load(std::memory_order_relaxed);
      const std::uint64_t b = c->verified_bytes.load(std::memory_order_relaxed);
      const std::uint64_t e = c->eio.load(std::memory_order_relaxed);
      reads += r;
      bytes += b;
      eio += e;
      if (r == 0 && e == 0) continue;  // a plain file, or a verity file not read yet
      files.push_back({{"path", c->path},
                       {"dev", static_cast<std::uint64_t>(c->dev)},
                       {"ino", static_cast<std::uint64_t>(c->ino)},
                       {"verified_reads", r},
                       {"verified_bytes", b},
                       {"eio", e}});
    }
  }
  const wq_stats q = verify.stats();
  const auto us = [&](double p) {
    return static_cast<double>(q.queue_to_start_ns.percentile(p)) / 1e3;
  };
  return {
      {"updated_unix_s",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"verified_reads", reads},
      {"verified_bytes", bytes},
      {"eio", eio},
      {"plain_reads", plain_reads_.load(std::memory_order_relaxed)},
      {"queue", q.name},
      {"queue_to_start_us",
       {{"count", q.queue_to_start_ns.count()},
        {"p50", us(50)},
        {"p99", us(99)},
        {"p99.9", us(99.9)},
        {"max", static_cast<double>(q.queue_to_start_ns.max()) / 1e3}}},
      {"files", std::move(files)}};
}

void mount_stats::write(const std::filesystem::path& file, const workqueue& verify) const {
  const std::string text = snapshot(verify).dump(2) + "\n";
  const std::filesystem::path tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "stats: " + tmp.string());
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::system_error(err, std::generic_category(), "stats: " + tmp.string());
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "stats: " + file.string());
  }
}

}  // namespace quiesce::mount::detail
