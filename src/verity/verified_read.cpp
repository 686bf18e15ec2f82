// Verified reads (kernel: fs/verity/verify.c, fsverity_enqueue_verify_work): the reader
// thread reads the blocks, a worker of the verification workqueue checks them against the
// Merkle tree, then the read completes. Also enable(), which writes the sidecar they read.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>

#include "hasher.hpp"
#include "merkle_layout.hpp"
#include "mutant.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/file_io.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "regular_file.hpp"
#include "sidecar.hpp"
#include "trust.hpp"

namespace quiesce::verity {

namespace fs = std::filesystem;
using detail::block_hasher;

namespace {

fs::path sidecar_of(const fs::path& file, const std::optional<fs::path>& sidecar) {
  return sidecar ? *sidecar : fs::path(file.string() + ".verity");
}

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

std::string_view bytes_of(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// What verifying one data block found.
enum class block_check { ok, mismatch, hash_failed };

}  // namespace

merkle_tree enable(const fs::path& file, const params& p, std::optional<fs::path> sidecar,
                   workqueue* wq, std::span<const std::uint8_t> signature) {
  if (signature.size() > max_signature_size) {
    throw std::invalid_argument(
        fmt::format("signature: {} bytes, at most {}", signature.size(), max_signature_size));
  }
  if (!signature.empty() && !detail::is_pkcs7_signature(signature)) {
    throw std::invalid_argument(
        "signature: not a DER PKCS#7 signature (as `fsverity sign` writes it)");
  }
  merkle_tree t = build_tree(file, p, wq);
  const fs::path out = sidecar_of(file, sidecar);
  const std::vector<std::uint8_t> prefix = detail::sidecar_prefix(descriptor(t), signature);
  write_file_atomically(out, {bytes_of(prefix), bytes_of(t.tree)});
  return t;
}

struct verified_file::impl {
  fs::path path;
  detail::unique_fd fd;
  workqueue* wq = nullptr;
  std::shared_ptr<workqueue> owned_wq;  // I: the second constructor's queue, kept alive
  merkle_tree t;                        // I: from the sidecar (tree bytes untrusted until verified)
  std::array<std::uint8_t, 256> hashed{};            // I: the descriptor, sig_size zeroed
  std::vector<std::uint8_t> signature;               // I
  trust_result trust;                                // I
  std::size_t d = 0, per_block = 0;                  // I
  std::vector<std::atomic<std::uint64_t>> verified;  // A: one bit per tree block
  std::atomic<std::uint64_t> reads{0}, blocks{0}, checked{0}, hits{0}, failures{0};  // A
  std::atomic<std::uint64_t> verify_ns{0};  // A: wall time the verification work items ran

  bool is_verified(std::size_t tree_block) const {
    return verified[tree_block / 64].load(std::memory_order_acquire) >> (tree_block % 64) & 1;
  }
  void mark(std::size_t tree_block) {
    verified[tree_block / 64].fetch_or(std::uint64_t{1} << (tree_block % 64),
                                       std::memory_order_release);
  }

  void open(const fs::path& file, const trust_policy& policy, const std::optional<fs::path>& sc);

  // Verifies data block `index` (its bytes in `block`, zero-padded): hash it, then climb
  // the tree until a hash block verified before, or the root. Nothing is marked verified
  // unless the whole climb matched. Allocation-free: it runs once per data block on the
  // verification worker.
  block_check verify_block(block_hasher& h, std::uint64_t index, const std::uint8_t* block) {
    std::array<std::uint8_t, max_digest_size> want{};
    if (!h.hash(block, t.p.block_size, want.data())) return block_check::hash_failed;
    blocks.fetch_add(1, std::memory_order_relaxed);
    if (t.levels.empty()) {
      return std::memcmp(want.data(), t.root_hash.data(), d) == 0 ? block_check::ok
                                                                  : block_check::mismatch;
    }
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
      if (std::memcmp(hash_block + pos, want.data(), d) != 0) return block_check::mismatch;
      const std::size_t tree_block = offset / t.p.block_size;
      if (is_verified(tree_block)) {
        hits.fetch_add(1, std::memory_order_relaxed);
        for (std::size_t i = 0; i < nr_climbed; ++i)
          mark(climbed[i]);
        return block_check::ok;
      }
      climbed[nr_climbed++] = tree_block;
      checked.fetch_add(1, std::memory_order_relaxed);
      // This block's hash, one level up.
      if (!h.hash(hash_block, t.p.block_size, want.data())) return block_check::hash_failed;
      in_level = hb;
    }
    if (std::memcmp(want.data(), t.root_hash.data(), d) != 0) return block_check::mismatch;
    for (std::size_t i = 0; i < nr_climbed; ++i)
      mark(climbed[i]);
    return block_check::ok;
  }
};

void verified_file::impl::open(const fs::path& file, const trust_policy& policy,
                               const std::optional<fs::path>& sc) {
  path = file;
  const fs::path side = sidecar_of(file, sc);
  const std::string side_name = side.string();
  detail::regular_file data = detail::open_regular(file);
  // ENODATA for a missing sidecar: the file has no fs-verity metadata.
  detail::regular_file sidecar = [&] {
    try {
      return detail::open_regular(side, ENODATA);
    } catch (const std::system_error& e) {
      if (e.code().value() != ENODATA) throw;
      fail(ENODATA, side_name + ": no fs-verity sidecar (run `quiesce verity enable`)");
    }
  }();
  // The descriptor first: nothing else is read from a sidecar it does not describe.
  const detail::sidecar_header h =
      detail::read_header(sidecar.fd.get(), sidecar.size, data.size, side_name);
  signature = detail::read_signature(sidecar.fd.get(), h, side_name);
  hashed = h.hashed;
  t.p = h.p;
  t.data_size = h.data_size;
  t.root_hash = h.root_hash;
  d = digest_size(t.p.alg);
  per_block = t.p.block_size / d;
  // Then the trust decision, on the descriptor alone: an untrusted tree is never read.
  trust = detail::check_trust(policy, t.p.alg, file_digest(t), signature, file.string());
  t.tree = detail::read_tree(sidecar.fd.get(), h, side_name);
  t.levels = h.layout.levels;
  verified = std::vector<std::atomic<std::uint64_t>>(t.tree.size() / t.p.block_size / 64 + 1);
  fd = std::move(data.fd);
}

verified_file::verified_file(const fs::path& file, workqueue& verify_wq, const trust_policy& trust,
                             std::optional<fs::path> sidecar)
    : impl_(std::make_unique<impl>()) {
  impl_->wq = &verify_wq;
  impl_->open(file, trust, sidecar);
}

verified_file::verified_file(const fs::path& file, std::shared_ptr<workqueue> verify_wq,
                             const trust_policy& trust, std::optional<fs::path> sidecar)
    : impl_(std::make_unique<impl>()) {
  if (!verify_wq) throw std::invalid_argument("verify_wq: null");
  impl_->wq = verify_wq.get();
  impl_->owned_wq = std::move(verify_wq);
  impl_->open(file, trust, sidecar);
}

verified_file::~verified_file() = default;

std::uint64_t verified_file::size() const noexcept {
  return impl_->t.data_size;
}
const merkle_tree& verified_file::tree() const noexcept {
  return impl_->t;
}
const std::vector<std::uint8_t>& verified_file::signature() const noexcept {
  return impl_->signature;
}
const trust_result& verified_file::trust() const noexcept {
  return impl_->trust;
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
  // An item of a one-at-a-time verification queue would wait for an item that can only
  // start after it returns.
  const wq_options& opt = m.wq->options();
  if ((opt.ordered || opt.max_active == 1) && m.wq->in_own_item() &&
      !mutant::verity_own_queue_read) {
    fail(EDEADLK, fmt::format("{}: read from a work item of its own verification queue '{}', "
                              "which runs one item at a time: the verification could never start",
                              m.path.string(), m.wq->name()));
  }
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
  if (const int err = detail::pread_exact(m.fd.get(), bio.data(), want, start)) {
    fail(err, m.path.string());
  }
  // Hand it to the verification queue and wait for completion - which the item signals on
  // every way out, a throw included.
  std::mutex lock;
  std::condition_variable done_cv;
  bool done = false;
  std::uint64_t bad_block = ~std::uint64_t{0};
  block_check bad = block_check::ok;
  std::exception_ptr error;
  work verify("fsverity_verify_work", [&](work&) {
    const std::uint64_t began = now_ns();
    try {
      block_hasher h(m.t.p);
      for (std::uint64_t b = first; b <= last; ++b) {
        const block_check c = m.verify_block(h, b, &bio[(b - first) * bs]);
        if (c != block_check::ok) {
          bad = c;
          bad_block = b;
          break;
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
    m.verify_ns.fetch_add(now_ns() - began, std::memory_order_relaxed);
    {
      std::lock_guard g(lock);
      done = true;
    }
    done_cv.notify_one();
  });
  if (!m.wq->queue(verify)) {  // never pending before: refused (draining, or exiting)
    m.failures.fetch_add(1, std::memory_order_relaxed);
    fail(EIO, fmt::format("{}: verification queue '{}' refused the work (it is draining or the "
                          "process is exiting); nothing was verified",
                          m.path.string(), m.wq->name()));
  }
  {
    may_block blocking;  // a reader may itself be a work item
    std::unique_lock g(lock);
    done_cv.wait(g, [&] { return done; });
  }
  verify.flush();  // the work item has fully finished before it goes out of scope
  if (error) {
    m.failures.fetch_add(1, std::memory_order_relaxed);
    std::string why = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    fail(EIO, fmt::format("{}: verification failed: {}", m.path.string(), why));
  }
  if (bad != block_check::ok) {
    m.failures.fetch_add(1, std::memory_order_relaxed);
    fail(EIO,
         bad == block_check::mismatch
             ? fmt::format("{}: block {} failed fs-verity verification", m.path.string(), bad_block)
             : fmt::format("{}: block {} could not be verified: libcrypto failed to hash",
                           m.path.string(), bad_block));
  }
  std::memcpy(buf.data(), bio.data() + (offset - start), len);
  return len;
}

}  // namespace quiesce::verity
