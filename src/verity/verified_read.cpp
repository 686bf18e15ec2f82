// SPDX-License-Identifier: Apache-2.0
// Verified reads (kernel: fs/verity/verify.c, fsverity_enqueue_verify_work): the reader
// thread reads the blocks, a worker of the verification workqueue checks them against the
// Merkle tree, then the read completes. Also enable(), which writes the sidecar they read.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <system_error>

#include "../base/file_io.hpp"
#include "../base/mutex.hpp"
#include "hasher.hpp"
#include "merkle_layout.hpp"
#include "mutant.hpp"
#include "quiesce/clock.hpp"
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

using detail::fail;

std::string_view bytes_of(std::span<const std::uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// What verifying one data block found.
enum class block_check { ok, mismatch, hash_failed };

// A read's blocks (the kernel's bio): whole blocks first..last, read by the calling thread,
// the tail block zero-padded; `offset` and `len` are the caller's bytes within them.
struct bio_buf {
  std::uint64_t first = 0, last = 0, offset = 0, len = 0;
  std::unique_ptr<std::uint8_t[]> bytes;
  std::size_t capacity = 0;
  std::span<const std::uint8_t> wanted(std::size_t bs) const {
    return {bytes.get() + (offset - first * bs), static_cast<std::size_t>(len)};
  }
};

// What verifying a bio found.
struct bio_outcome {
  block_check bad = block_check::ok;
  std::uint64_t bad_block = 0;
  std::exception_ptr error;  // the verification threw (e.g. libcrypto has no such digest)
};

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
  // read_async's work items: every one made (kept until destruction, which flushes them)
  // and those free for a next read.
  quiesce::detail::mutex async_lock{"verity async_lock"};
  std::vector<std::unique_ptr<async_read>> async_all QUIESCE_GUARDED_BY(async_lock);
  std::vector<async_read*> async_idle QUIESCE_GUARDED_BY(async_lock);

  async_read* take_async();
  void fill_bio(bio_buf& bio, std::uint64_t offset, std::uint64_t len) const;
  bio_outcome verify_bio(const bio_buf& bio);
  std::optional<std::system_error> failure_of(const bio_outcome& o);
  std::system_error refused();
  void recycle(async_read* r) {
    quiesce::detail::lock_guard g(async_lock);
    async_idle.push_back(r);
  }
  ~impl();

  bool is_verified(std::size_t tree_block) const {
    return verified[tree_block / 64].load(std::memory_order_acquire) >> (tree_block % 64) & 1;
  }
  void mark(std::size_t tree_block) {
    verified[tree_block / 64].fetch_or(std::uint64_t{1} << (tree_block % 64),
                                       std::memory_order_release);
  }

  void open(const fs::path& file, const trust_policy& policy, const std::optional<fs::path>& sc);
  // Steps 2-4 of an open, on checked files.
  void load(detail::regular_file data, const detail::regular_file& sidecar, const std::string& name,
            const std::string& side_name, const trust_policy& policy,
            std::uint64_t max_tree_bytes = std::numeric_limits<std::uint64_t>::max());

  // Verifies every data block of `bio` in batches: all its data blocks' hashes at once,
  // then the tree level by level, each level's hash blocks not yet verified hashed
  // together (the blocks of a read share them). Nothing is marked verified unless every
  // block's climb matched. Returns ok, hash_failed (`bad_block`: the data block whose
  // hash, or whose climb's, failed), or mismatch - then verify_block, one block at a
  // time, names the first bad block.
  block_check verify_batch(block_hasher& h, const bio_buf& bio, std::uint64_t& bad_block);

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

// The verification of a read that completes on the worker (read_async): a work item and
// its bio, recycled once the completion has run.
struct verified_file::async_read {
  explicit async_read(verified_file::impl& m);
  work verify;
  bio_buf bio;
  read_done done;
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
  load(std::move(data), sidecar, file.string(), side_name, policy);
}

void verified_file::impl::load(detail::regular_file data, const detail::regular_file& sidecar,
                               const std::string& name, const std::string& side_name,
                               const trust_policy& policy, std::uint64_t max_tree_bytes) {
  // The descriptor first: nothing else is read from a sidecar it does not describe.
  const detail::sidecar_header h =
      detail::read_header(sidecar.fd.get(), sidecar.size, data.size, side_name);
  if (h.layout.tree_bytes > max_tree_bytes) {
    detail::fail(EFBIG, fmt::format("{}: a tree of {} bytes, over the {} this open allows",
                                    side_name, h.layout.tree_bytes, max_tree_bytes));
  }
  signature = detail::read_signature(sidecar.fd.get(), h, side_name);
  hashed = h.hashed;
  t.p = h.p;
  t.data_size = h.data_size;
  t.root_hash = h.root_hash;
  d = digest_size(t.p.alg);
  per_block = t.p.block_size / d;
  // Then the trust decision, on the descriptor alone: an untrusted tree is never read.
  trust = detail::check_trust(policy, t.p.alg, file_digest(t), signature, name);
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

namespace {

// A duplicate of `fd` checked as open_regular checks what it opens.
detail::regular_file dup_regular(int fd, const std::string& name) {
  detail::unique_fd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (own.get() < 0) fail(errno, name);
  const std::uint64_t size = detail::check_regular(own.get(), name);
  return {std::move(own), size};
}

}  // namespace

verified_file::verified_file(int data_fd, int sidecar_fd, const std::string& name,
                             workqueue& verify_wq, const trust_policy& trust,
                             std::uint64_t max_tree_bytes)
    : impl_(std::make_unique<impl>()) {
  impl_->wq = &verify_wq;
  impl_->path = name;
  const std::string side_name = name + " (sidecar)";
  detail::regular_file data = dup_regular(data_fd, name);
  const detail::regular_file sidecar = dup_regular(sidecar_fd, side_name);
  impl_->load(std::move(data), sidecar, name, side_name, trust, max_tree_bytes);
}

const std::array<std::uint8_t, 256>& verified_file::descriptor() const noexcept {
  return impl_->hashed;
}

void write_sidecar(int fd, const std::string& name, const merkle_tree& t,
                   std::span<const std::uint8_t> signature) {
  if (signature.size() > max_signature_size) {
    throw std::invalid_argument(
        fmt::format("signature: {} bytes, at most {}", signature.size(), max_signature_size));
  }
  if (!signature.empty() && !detail::is_pkcs7_signature(signature)) {
    throw std::invalid_argument(
        "signature: not a DER PKCS#7 signature (as `fsverity sign` writes it)");
  }
  const std::vector<std::uint8_t> prefix = detail::sidecar_prefix(descriptor(t), signature);
  std::uint64_t at = 0;
  for (std::span<const std::uint8_t> part :
       {std::span<const std::uint8_t>(prefix), std::span<const std::uint8_t>(t.tree)}) {
    while (!part.empty()) {
      const ssize_t n = ::pwrite(fd, part.data(), part.size(), static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(n < 0 ? errno : EIO, name);
      part = part.subspan(static_cast<std::size_t>(n));
      at += static_cast<std::uint64_t>(n);
    }
  }
}

std::optional<sidecar_identity> probe_sidecar(int fd) noexcept {
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size < static_cast<off_t>(detail::descriptor_size)) {
      return std::nullopt;
    }
    std::array<std::uint8_t, 16> head{};
    if (detail::pread_exact(fd, head.data(), head.size(), 0) != 0) return std::nullopt;
    std::uint64_t data_size = 0;
    for (int i = 0; i < 8; ++i)
      data_size |= std::uint64_t{head[8 + static_cast<std::size_t>(i)]} << (8 * i);
    const detail::sidecar_header h =
        detail::read_header(fd, static_cast<std::uint64_t>(st.st_size), data_size, "sidecar");
    return sidecar_identity{h.hashed, h.data_size};
  } catch (...) {
    return std::nullopt;
  }
}

verified_file::async_read* verified_file::impl::take_async() {
  quiesce::detail::lock_guard g(async_lock);
  if (!async_idle.empty()) {
    async_read* r = async_idle.back();
    async_idle.pop_back();
    return r;
  }
  async_all.push_back(std::make_unique<async_read>(*this));
  return async_all.back().get();
}

verified_file::impl::~impl() {
  // Every asynchronous read has completed (the caller's contract: none is started while
  // the file is destroyed); wait for their items' last steps.
  for (const auto& r : async_all)
    r->verify.flush();
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

// Reads the blocks of [offset, offset + len) into `bio` (its buffer reused when large
// enough; never zeroed but for the tail's padding). Throws std::system_error.
void verified_file::impl::fill_bio(bio_buf& bio, std::uint64_t offset, std::uint64_t len) const {
  const verified_file::impl& m = *this;
  const std::size_t bs = m.t.p.block_size;
  bio.offset = offset;
  bio.len = len;
  bio.first = offset / bs;
  bio.last = (offset + len - 1) / bs;
  const std::size_t size = (bio.last - bio.first + 1) * bs;
  if (bio.capacity < size) {
    bio.bytes = std::make_unique_for_overwrite<std::uint8_t[]>(size);  // no zeroing
    bio.capacity = size;
  }
  const std::uint64_t start = bio.first * bs;
  const std::uint64_t want = std::min<std::uint64_t>(size, m.t.data_size - start);
  std::fill(bio.bytes.get() + want, bio.bytes.get() + size, 0);  // the tail's padding
  if (const int err = detail::pread_exact(m.fd.get(), bio.bytes.get(), want, start)) {
    fail(err, m.path.string());
  }
}

block_check verified_file::impl::verify_batch(block_hasher& h, const bio_buf& bio,
                                              std::uint64_t& bad_block) {
  // The worker's scratch, kept between reads: no allocation once grown.
  thread_local std::vector<std::uint8_t> want, next_want;
  thread_local std::vector<std::uint64_t> index, next_index;
  thread_local std::vector<std::uint64_t> origin, next_origin;  // the first data block under
  thread_local std::vector<const std::uint8_t*> to_hash;
  thread_local std::vector<std::size_t> climbed;
  const std::size_t bs = t.p.block_size;
  const std::size_t n = static_cast<std::size_t>(bio.last - bio.first + 1);
  bad_block = bio.first;
  to_hash.resize(n);
  index.resize(n);
  origin.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    to_hash[i] = &bio.bytes[i * bs];
    index[i] = origin[i] = bio.first + i;
  }
  want.resize(n * d);
  if (const std::size_t done = h.hash_many(to_hash.data(), n, want.data()); done != n) {
    bad_block = bio.first + done;
    return block_check::hash_failed;
  }
  blocks.fetch_add(n, std::memory_order_relaxed);
  climbed.clear();
  for (std::size_t level = 0; level < t.levels.size() && !index.empty(); ++level) {
    next_index.clear();
    next_origin.clear();
    to_hash.clear();
    for (std::size_t i = 0; i < index.size(); ++i) {
      const std::uint64_t hb = index[i] / per_block;
      const std::size_t pos = static_cast<std::size_t>(index[i] % per_block) * d;
      const std::size_t offset = t.levels[level].offset + hb * bs;
      const std::uint8_t* hash_block = &t.tree[offset];
      if (mutant::verity_batch_shared_unchecked && !next_index.empty() && next_index.back() == hb)
        continue;
      if (std::memcmp(hash_block + pos, &want[i * d], d) != 0) return block_check::mismatch;
      const std::size_t tree_block = offset / bs;
      if (is_verified(tree_block)) {
        hits.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      // Ascending indexes: a hash block shared with the entry before is queued already.
      if (!next_index.empty() && next_index.back() == hb) continue;
      next_index.push_back(hb);
      next_origin.push_back(origin[i]);
      to_hash.push_back(hash_block);
      climbed.push_back(tree_block);
    }
    checked.fetch_add(to_hash.size(), std::memory_order_relaxed);
    next_want.resize(to_hash.size() * d);
    if (const std::size_t done = h.hash_many(to_hash.data(), to_hash.size(), next_want.data());
        done != to_hash.size()) {
      bad_block = next_origin[done];
      return block_check::hash_failed;
    }
    index.swap(next_index);
    origin.swap(next_origin);
    want.swap(next_want);
  }
  // What is left climbed past the top level: the one top block, against the root hash.
  if (!index.empty() && std::memcmp(want.data(), t.root_hash.data(), d) != 0) {
    return block_check::mismatch;
  }
  for (const std::size_t b : climbed)
    mark(b);
  return block_check::ok;
}

// On the verification worker: every data block of `bio`, climbing the tree - in batches,
// and on a mismatch one block at a time to name the first bad one.
bio_outcome verified_file::impl::verify_bio(const bio_buf& bio) {
  verified_file::impl& m = *this;
  const std::uint64_t began = now_ns();
  bio_outcome out;
  try {
    block_hasher h(m.t.p);
    const std::size_t bs = m.t.p.block_size;
    out.bad = m.verify_batch(h, bio, out.bad_block);
    if (out.bad == block_check::mismatch) {
      for (std::uint64_t b = bio.first; b <= bio.last; ++b) {
        const block_check c = m.verify_block(h, b, &bio.bytes[(b - bio.first) * bs]);
        if (c != block_check::ok) {
          out.bad = c;
          out.bad_block = b;
          break;
        }
      }
      // The bytes and the tree are in memory and unchanged, so the walk finds what the
      // batch found; should it not, the read still fails (at the bio's first block).
    }
  } catch (...) {
    out.error = std::current_exception();
  }
  m.verify_ns.fetch_add(now_ns() - began, std::memory_order_relaxed);
  return out;
}

// The read's error, if the outcome is one: EIO naming the file and block, or the cause.
std::optional<std::system_error> verified_file::impl::failure_of(const bio_outcome& o) {
  verified_file::impl& m = *this;
  if (!o.error && o.bad == block_check::ok) return std::nullopt;
  m.failures.fetch_add(1, std::memory_order_relaxed);
  if (o.error) {
    std::string why = "unknown exception";
    try {
      std::rethrow_exception(o.error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    return std::system_error(EIO, std::generic_category(),
                             fmt::format("{}: verification failed: {}", m.path.string(), why));
  }
  return std::system_error(
      EIO, std::generic_category(),
      o.bad == block_check::mismatch
          ? fmt::format("{}: block {} failed fs-verity verification", m.path.string(), o.bad_block)
          : fmt::format("{}: block {} could not be verified: libcrypto failed to hash",
                        m.path.string(), o.bad_block));
}

std::system_error verified_file::impl::refused() {
  verified_file::impl& m = *this;
  m.failures.fetch_add(1, std::memory_order_relaxed);
  return std::system_error(
      EIO, std::generic_category(),
      fmt::format("{}: verification queue '{}' refused the work (it is draining or the process "
                  "is exiting); nothing was verified",
                  m.path.string(), m.wq->name()));
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
  bio_buf bio;
  m.fill_bio(bio, offset, std::min<std::uint64_t>(buf.size(), m.t.data_size - offset));
  // Hand it to the verification queue and wait for completion - which the item signals on
  // every way out.
  quiesce::detail::mutex lock{"verity read_at lock"};
  std::condition_variable done_cv;
  bool done = false;    // L(lock)
  bio_outcome outcome;  // written by the item before `done`, read after it
  work verify("fsverity_verify_work", [&](work&) {
    outcome = m.verify_bio(bio);
    {
      quiesce::detail::lock_guard g(lock);
      done = true;
    }
    done_cv.notify_one();
  });
  if (!m.wq->queue(verify)) throw m.refused();  // never pending before: refused
  {
    may_block blocking;  // a reader may itself be a work item
    quiesce::detail::unique_lock g(lock);
    while (!done)
      g.wait(done_cv);
  }
  verify.flush();  // the work item has fully finished before it goes out of scope
  if (auto e = m.failure_of(outcome)) throw *e;
  const std::span<const std::uint8_t> wanted = bio.wanted(m.t.p.block_size);
  std::memcpy(buf.data(), wanted.data(), wanted.size());
  return wanted.size();
}

verified_file::async_read::async_read(verified_file::impl& m)
    : verify("fsverity_verify_work", [this, &m](work&) {
        const bio_outcome outcome = m.verify_bio(bio);
        read_done cb = std::move(done);
        if (auto e = m.failure_of(outcome)) {
          cb({}, e->code().value(), e->what());
        } else {
          cb(bio.wanted(m.t.p.block_size), 0, {});
        }
        m.recycle(this);  // the last touch: it may be queued again at once
      }) {}

void verified_file::read_async(std::uint64_t offset, std::size_t len, read_done done) {
  impl& m = *impl_;
  m.reads.fetch_add(1, std::memory_order_relaxed);
  if (offset >= m.t.data_size || len == 0) {
    done({}, 0, {});
    return;
  }
  async_read* r = m.take_async();
  try {
    m.fill_bio(r->bio, offset, std::min<std::uint64_t>(len, m.t.data_size - offset));
  } catch (const std::system_error& e) {
    m.recycle(r);
    done({}, e.code().value(), e.what());
    return;
  }
  r->done = std::move(done);
  if (!m.wq->queue(r->verify)) {
    read_done cb = std::move(r->done);
    m.recycle(r);
    const std::system_error e = m.refused();
    cb({}, EIO, e.what());
  }
}

}  // namespace quiesce::verity
