// Verified reads (kernel: fs/verity/verify.c, fsverity_enqueue_verify_work): the reader
// thread reads the blocks, a worker of the verification workqueue checks them against the
// Merkle tree, then the read completes.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <system_error>

#include "hasher.hpp"
#include "merkle_layout.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/file_io.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::verity {

namespace fs = std::filesystem;
using detail::block_hasher;

namespace {

constexpr int max_verified_log_block = 20;  // 1 MiB

fs::path sidecar_of(const fs::path& file, const std::optional<fs::path>& sidecar) {
  return sidecar ? *sidecar : fs::path(file.string() + ".verity");
}

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

merkle_tree enable(const fs::path& file, const params& p, std::optional<fs::path> sidecar,
                   workqueue* wq) {
  merkle_tree t = build_tree(file, p, wq);
  const fs::path out = sidecar_of(file, sidecar);
  const auto desc = descriptor(t);
  write_file_atomically(
      out, {std::string_view(reinterpret_cast<const char*>(desc.data()), desc.size()),
            std::string_view(reinterpret_cast<const char*>(t.tree.data()), t.tree.size())});
  return t;
}

struct verified_file::impl {
  fs::path path;
  int fd = -1;
  workqueue* wq = nullptr;
  merkle_tree t;  // I: from the sidecar (tree bytes untrusted until verified)
  std::array<std::uint8_t, 256> desc{};
  std::size_t d = 0, per_block = 0;
  std::vector<std::atomic<std::uint64_t>> verified;  // A: one bit per tree block
  std::atomic<std::uint64_t> reads{0}, blocks{0}, checked{0}, hits{0}, failures{0};  // A
  std::atomic<std::uint64_t> verify_ns{0};  // A: wall time the verification work items ran

  ~impl() {
    if (fd >= 0) ::close(fd);
  }

  bool is_verified(std::size_t tree_block) const {
    return verified[tree_block / 64].load(std::memory_order_acquire) >> (tree_block % 64) & 1;
  }
  void mark(std::size_t tree_block) {
    verified[tree_block / 64].fetch_or(std::uint64_t{1} << (tree_block % 64),
                                       std::memory_order_release);
  }

  // Verifies data block `index` (its bytes in `block`, zero-padded): hash it, then climb
  // the tree until a hash block verified before, or the root. False on any mismatch.
  // Allocation-free: it runs once per data block on the verification worker.
  bool verify_block(block_hasher& h, std::uint64_t index, const std::uint8_t* block) {
    std::array<std::uint8_t, max_digest_size> want;
    h.hash(block, t.p.block_size, want.data());
    blocks.fetch_add(1, std::memory_order_relaxed);
    if (t.levels.empty()) return std::memcmp(want.data(), t.root_hash.data(), d) == 0;
    // Tree blocks checked on the way up: at most one per level, and a tree has fewer than
    // 64 levels (two hashes per block at the least, 2^64 bytes at the most).
    std::array<std::size_t, 64> climbed;
    std::size_t nr_climbed = 0;
    std::uint64_t in_level = index;
    for (std::size_t level = 0; level < t.levels.size(); ++level) {
      const std::uint64_t hb = in_level / per_block;
      const std::size_t pos = static_cast<std::size_t>(in_level % per_block) * d;
      const std::size_t offset = t.levels[level].offset + hb * t.p.block_size;
      const std::uint8_t* hash_block = &t.tree[offset];
      if (std::memcmp(hash_block + pos, want.data(), d) != 0) return false;
      const std::size_t tree_block = offset / t.p.block_size;
      if (is_verified(tree_block)) {
        hits.fetch_add(1, std::memory_order_relaxed);
        for (std::size_t i = 0; i < nr_climbed; ++i)
          mark(climbed[i]);
        return true;
      }
      climbed[nr_climbed++] = tree_block;
      checked.fetch_add(1, std::memory_order_relaxed);
      h.hash(hash_block, t.p.block_size, want.data());  // this block's hash, one level up
      in_level = hb;
    }
    if (std::memcmp(want.data(), t.root_hash.data(), d) != 0) return false;
    for (std::size_t i = 0; i < nr_climbed; ++i)
      mark(climbed[i]);
    return true;
  }
};

verified_file::verified_file(const fs::path& file, workqueue& verify_wq,
                             std::optional<fs::path> sidecar)
    : impl_(std::make_unique<impl>()) {
  impl& m = *impl_;
  m.path = file;
  m.wq = &verify_wq;
  const fs::path side = sidecar_of(file, sidecar);
  std::ifstream in(side, std::ios::binary);
  if (!in) fail(ENODATA, side.string() + ": no fs-verity sidecar (run `quiesce verity enable`)");
  std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
  if (bytes.size() < 256) fail(EINVAL, side.string() + ": shorter than a descriptor");
  std::copy(bytes.begin(), bytes.begin() + 256, m.desc.begin());
  const auto& desc = m.desc;
  if (desc[0] != 1) fail(EINVAL, side.string() + ": descriptor version is not 1");
  if (desc[1] != 1 && desc[1] != 2) fail(EINVAL, side.string() + ": unknown hash algorithm");
  if (desc[3] > 32) fail(EINVAL, side.string() + ": salt over 32 bytes");
  // A read holds its blocks in memory: a hostile sidecar must not make that a gigabyte.
  if (desc[2] > max_verified_log_block) {
    fail(EINVAL, fmt::format("{}: block size 2^{} is over the 2^{} verified reads accept",
                             side.string(), desc[2], max_verified_log_block));
  }
  m.t.p.alg = static_cast<hash_alg>(desc[1]);
  m.t.p.block_size = std::size_t{1} << desc[2];
  m.t.p.salt.assign(desc.begin() + 80, desc.begin() + 80 + desc[3]);
  try {
    m.t.p.validate();
  } catch (const std::invalid_argument& e) {
    fail(EINVAL, side.string() + ": " + e.what());
  }
  for (int i = 0; i < 8; ++i)
    m.t.data_size |= std::uint64_t{desc[8 + i]} << (8 * i);
  m.d = digest_size(m.t.p.alg);
  m.per_block = m.t.p.block_size / m.d;
  m.t.root_hash.assign(desc.begin() + 16, desc.begin() + 16 + static_cast<std::ptrdiff_t>(m.d));
  m.t.tree.assign(bytes.begin() + 256, bytes.end());

  m.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (m.fd < 0) fail(errno, file.string());
  struct stat st {};
  if (::fstat(m.fd, &st) != 0) fail(errno, file.string());
  if (static_cast<std::uint64_t>(st.st_size) != m.t.data_size) {
    fail(EINVAL, fmt::format("{}: size {} differs from the descriptor's {}", file.string(),
                             st.st_size, m.t.data_size));
  }
  // The level layout the descriptor implies, and the tree's size checked against it.
  detail::merkle_layout layout = detail::layout_of(m.t.data_size, m.t.p);
  if (layout.tree_bytes != m.t.tree.size()) {
    fail(EINVAL, fmt::format("{}: tree of {} bytes, the descriptor implies {}", side.string(),
                             m.t.tree.size(), layout.tree_bytes));
  }
  m.t.levels = std::move(layout.levels);
  m.verified = std::vector<std::atomic<std::uint64_t>>(m.t.tree.size() / m.t.p.block_size / 64 + 1);
}

verified_file::~verified_file() = default;

std::uint64_t verified_file::size() const noexcept {
  return impl_->t.data_size;
}
const merkle_tree& verified_file::tree() const noexcept {
  return impl_->t;
}

read_stats verified_file::stats() const noexcept {
  const impl& m = *impl_;
  return {m.reads.load(), m.blocks.load(),   m.checked.load(),
          m.hits.load(),  m.failures.load(), m.verify_ns.load()};
}

std::vector<std::uint8_t> verified_file::digest() const {
  return file_digest(impl_->t);
}

std::size_t verified_file::read(std::uint64_t offset, std::span<std::uint8_t> buf) {
  impl& m = *impl_;
  m.reads.fetch_add(1, std::memory_order_relaxed);
  if (offset >= m.t.data_size || buf.empty()) return 0;
  const std::size_t bs = m.t.p.block_size;
  const std::uint64_t len = std::min<std::uint64_t>(buf.size(), m.t.data_size - offset);
  const std::uint64_t first = offset / bs, last = (offset + len - 1) / bs;
  // The "bio": whole blocks, read by this thread; the tail block zero-padded.
  const std::size_t bio_size = (last - first + 1) * bs;
  auto bio_mem = std::make_unique_for_overwrite<std::uint8_t[]>(bio_size);  // no zeroing
  const std::span<std::uint8_t> bio(bio_mem.get(), bio_size);
  const std::uint64_t start = first * bs;
  const std::uint64_t want = std::min<std::uint64_t>(bio.size(), m.t.data_size - start);
  std::fill(bio.begin() + static_cast<std::ptrdiff_t>(want), bio.end(), 0);  // the tail's padding
  for (std::size_t got = 0; got < want;) {
    const ssize_t r = ::pread(m.fd, bio.data() + got, want - got, static_cast<off_t>(start + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail(r < 0 ? errno : EIO, m.path.string());
    got += static_cast<std::size_t>(r);
  }
  // Hand it to the verification queue and wait for completion.
  std::mutex lock;
  std::condition_variable done_cv;
  bool done = false;
  std::uint64_t bad_block = ~std::uint64_t{0};
  work verify("fsverity_verify_work", [&](work&) {
    const std::uint64_t began = now_ns();
    block_hasher h(m.t.p);
    for (std::uint64_t b = first; b <= last; ++b) {
      if (!m.verify_block(h, b, &bio[(b - first) * bs])) {
        bad_block = b;
        break;
      }
    }
    m.verify_ns.fetch_add(now_ns() - began, std::memory_order_relaxed);
    {
      std::lock_guard g(lock);
      done = true;
    }
    done_cv.notify_one();
  });
  m.wq->queue(verify);
  {
    may_block blocking;  // a reader may itself be a work item
    std::unique_lock g(lock);
    done_cv.wait(g, [&] { return done; });
  }
  verify.flush();  // the work item has fully finished before it goes out of scope
  if (bad_block != ~std::uint64_t{0}) {
    m.failures.fetch_add(1, std::memory_order_relaxed);
    fail(EIO,
         fmt::format("{}: block {} failed fs-verity verification", m.path.string(), bad_block));
  }
  std::memcpy(buf.data(), bio.data() + (offset - start), len);
  return len;
}

}  // namespace quiesce::verity
