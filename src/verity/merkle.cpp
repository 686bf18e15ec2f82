// SPDX-License-Identifier: Apache-2.0
// Merkle trees, descriptors and file digests (byte-identical to fsverity-utils), built from
// memory or streamed from a file, level 0 optionally in parallel on a workqueue.
#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "hasher.hpp"
#include "merkle_layout.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "regular_file.hpp"
#include "trust.hpp"

namespace quiesce::verity {

using detail::block_hasher;
using detail::md_of;

std::size_t digest_size(hash_alg alg) noexcept {
  return alg == hash_alg::sha512 ? 64 : 32;
}

const char* to_string(hash_alg alg) noexcept {
  return alg == hash_alg::sha512 ? "sha512" : "sha256";
}

hash_alg parse_hash_alg(std::string_view text) {
  if (text == "sha256" || text == "1") return hash_alg::sha256;
  if (text == "sha512" || text == "2") return hash_alg::sha512;
  throw std::invalid_argument("hash-alg: '" + std::string(text) +
                              "' is not one of sha256 (1), sha512 (2)");
}

void params::validate() const {
  if (alg != hash_alg::sha256 && alg != hash_alg::sha512) {
    throw std::invalid_argument(fmt::format("hash-alg: {} is not an fs-verity algorithm (1, 2)",
                                            static_cast<unsigned>(alg)));
  }
  const std::size_t d = digest_size(alg);
  if (block_size == 0 || (block_size & (block_size - 1)) != 0) {
    throw std::invalid_argument(fmt::format("block-size: {} is not a power of two", block_size));
  }
  if (block_size > max_block_size) {
    throw std::invalid_argument(
        fmt::format("block-size: {} is above {}, the largest fs-verity block size here", block_size,
                    max_block_size));
  }
  if (block_size < 2 * d) {
    throw std::invalid_argument(
        fmt::format("block-size: {} is below twice the {} digest size "
                    "({})",
                    block_size, to_string(alg), 2 * d));
  }
  if (salt.size() > 32) {
    throw std::invalid_argument(fmt::format("salt: {} bytes, at most 32", salt.size()));
  }
}

namespace {

[[noreturn]] void hash_failed() {
  throw std::system_error(EIO, std::generic_category(), "libcrypto: a hash failed");
}

// Hashes `count` consecutive blocks at `first` into `out` (consecutive digests), in
// batches for the multi-buffer kernels. False if a hash failed.
bool hash_blocks(block_hasher& hasher, const std::uint8_t* first, std::uint64_t count,
                 std::size_t block_size, std::size_t digest, std::uint8_t* out) {
  constexpr std::size_t batch = 64;
  const std::uint8_t* blocks[batch];
  for (std::uint64_t b = 0; b < count; b += batch) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(batch, count - b));
    for (std::size_t i = 0; i < n; ++i)
      blocks[i] = first + (b + i) * block_size;
    if (hasher.hash_many(blocks, n, out + b * digest) != n) return false;
  }
  return true;
}

// Builds the levels above level 0 (given its hashes) and fills the tree.
void finish_tree(merkle_tree& t, std::vector<std::uint8_t> hashes, std::uint64_t blocks) {
  const params& p = t.p;
  const std::size_t d = digest_size(p.alg);
  t.root_hash.assign(d, 0);
  if (blocks == 0) return;  // empty file: all-zero root
  if (blocks == 1) {
    t.root_hash.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(d));
    return;
  }
  // Each level is the hashes of the one below, written into its place in the tree (zero
  // padded to whole blocks); the root hash is the hash of the single top block.
  block_hasher hasher(p);
  detail::merkle_layout layout = detail::layout_of(t.data_size, p);
  t.tree.assign(static_cast<std::size_t>(layout.tree_bytes), 0);
  std::uint64_t count = blocks;  // hashes in `hashes`
  for (const merkle_tree::level& level : layout.levels) {
    std::uint8_t* const at = t.tree.data() + level.offset;
    std::copy(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(count * d), at);
    std::vector<std::uint8_t> next(level.blocks * d);
    if (!hash_blocks(hasher, at, level.blocks, p.block_size, d, next.data())) hash_failed();
    hashes = std::move(next);
    count = level.blocks;
  }
  t.root_hash.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(d));
  t.levels = std::move(layout.levels);
}

// Hashes data blocks [first, last) of `fd` into `out` (level-0 hashes), reading 1 MiB at
// a time. Returns 0 or an errno (EIO if a hash failed).
int hash_range(int fd, const params& p, std::uint64_t size, std::uint64_t first, std::uint64_t last,
               std::uint8_t* out, const std::atomic<bool>* stop) {
  block_hasher hasher(p);
  const std::size_t d = digest_size(p.alg);
  const std::size_t chunk_blocks = std::max<std::size_t>(1, (1u << 20) / p.block_size);
  std::vector<std::uint8_t> buf(chunk_blocks * p.block_size);
  for (std::uint64_t b = first; b < last;) {
    if (stop && stop->load(std::memory_order_relaxed)) return EINTR;
    const std::uint64_t n = std::min<std::uint64_t>(chunk_blocks, last - b);
    const std::uint64_t offset = b * p.block_size;
    const std::uint64_t want = std::min<std::uint64_t>(n * p.block_size, size - offset);
    if (const int err = detail::pread_exact(fd, buf.data(), want, offset)) return err;
    std::fill(buf.begin() + static_cast<std::ptrdiff_t>(want),
              buf.begin() + static_cast<std::ptrdiff_t>(n * p.block_size), 0);
    if (!hash_blocks(hasher, buf.data(), n, p.block_size, d, out + (b - first) * d)) return EIO;
    b += n;
  }
  return 0;
}

}  // namespace

merkle_tree build_tree(const std::uint8_t* data, std::size_t size, const params& p) {
  p.validate();
  merkle_tree t;
  t.p = p;
  t.data_size = size;
  const std::size_t d = digest_size(p.alg);
  const std::uint64_t blocks = (size + p.block_size - 1) / p.block_size;
  std::vector<std::uint8_t> hashes(blocks * d);
  block_hasher hasher(p);
  const std::uint64_t whole = size / p.block_size;  // the rest, if any, zero-padded
  if (!hash_blocks(hasher, data, whole, p.block_size, d, hashes.data())) hash_failed();
  if (whole < blocks) {
    std::vector<std::uint8_t> last(p.block_size, 0);
    std::copy(data + whole * p.block_size, data + size, last.begin());
    if (!hasher.hash(last.data(), p.block_size, &hashes[whole * d])) hash_failed();
  }
  finish_tree(t, std::move(hashes), blocks);
  return t;
}

merkle_tree build_tree(const std::filesystem::path& path, const params& p, workqueue* wq) {
  p.validate();
  const detail::regular_file file = detail::open_regular(path);
  return build_tree(file.fd.get(), path.string(), p, wq);
}

merkle_tree build_tree(int fd, const std::string& name, const params& p, workqueue* wq,
                       const std::atomic<bool>* stop) {
  p.validate();
  merkle_tree t;
  t.p = p;
  t.data_size = detail::check_regular(fd, name);
  const std::size_t d = digest_size(p.alg);
  const std::uint64_t blocks = (t.data_size + p.block_size - 1) / p.block_size;
  std::vector<std::uint8_t> hashes(blocks * d);
  int err = 0;
  // Parallel level 0: one work item per range of at least 4 MiB, on the given queue.
  const std::uint64_t min_range = std::max<std::uint64_t>(1, (4u << 20) / p.block_size);
  if (wq && blocks > 2 * min_range) {
    const std::uint64_t parts = std::min<std::uint64_t>(64, blocks / min_range);
    std::atomic<int> first_err{0};
    auto record = [&first_err](int e) {
      int expected = 0;
      first_err.compare_exchange_strong(expected, e);
    };
    std::vector<std::unique_ptr<work>> items;
    bool refused = false;
    for (std::uint64_t i = 0; i < parts && !refused; ++i) {
      const std::uint64_t lo = blocks * i / parts, hi = blocks * (i + 1) / parts;
      items.push_back(std::make_unique<work>("verity_hash_level0", [&, lo, hi](work&) {
        try {
          if (const int e = hash_range(fd, p, t.data_size, lo, hi, &hashes[lo * d], stop))
            record(e);
        } catch (...) {  // e.g. no digest in libcrypto: the range is not hashed
          record(EIO);
        }
      }));
      // A draining (or exiting) queue refuses the item: its range would stay unhashed.
      refused = !wq->queue(*items.back());
    }
    for (auto& w : items)
      w->flush();  // every queued item has finished before `hashes` goes
    if (refused) {
      throw std::system_error(ECANCELED, std::generic_category(),
                              fmt::format("{}: workqueue '{}' refused the hashing work (draining "
                                          "or exiting)",
                                          name, wq->name()));
    }
    err = first_err.load();
  } else {
    err = hash_range(fd, p, t.data_size, 0, blocks, hashes.data(), stop);
  }
  if (err == EINTR) throw std::system_error(EINTR, std::generic_category(), name + ": interrupted");
  if (err) throw std::system_error(err, std::generic_category(), name);
  finish_tree(t, std::move(hashes), blocks);
  return t;
}

std::array<std::uint8_t, 256> descriptor(const merkle_tree& t) {
  std::array<std::uint8_t, 256> desc{};
  desc[0] = 1;  // version
  desc[1] = static_cast<std::uint8_t>(t.p.alg);
  std::uint8_t log2 = 0;
  while ((std::size_t{1} << log2) < t.p.block_size)
    ++log2;
  desc[2] = log2;
  desc[3] = static_cast<std::uint8_t>(t.p.salt.size());
  // desc[4..7]: sig_size, zero when hashing
  for (int i = 0; i < 8; ++i)
    desc[8 + i] = static_cast<std::uint8_t>(t.data_size >> (8 * i));
  std::copy(t.root_hash.begin(), t.root_hash.end(), desc.begin() + 16);
  std::copy(t.p.salt.begin(), t.p.salt.end(), desc.begin() + 80);
  return desc;
}

std::vector<std::uint8_t> file_digest(const merkle_tree& t) {
  detail::init_crypto();
  const auto desc = descriptor(t);
  std::vector<std::uint8_t> out(digest_size(t.p.alg));
  unsigned len = 0;
  if (EVP_Digest(desc.data(), desc.size(), out.data(), &len, md_of(t.p.alg), nullptr) != 1) {
    throw std::runtime_error("libcrypto: digest failed");
  }
  return out;
}

std::vector<std::uint8_t> builtin_sig_message(const merkle_tree& t) {
  return detail::formatted_digest(t.p.alg, file_digest(t));
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<std::uint8_t> from_hex(std::string_view hex) {
  auto nibble = [hex](char c) -> std::uint8_t {
    if (c >= '0' && c <= '9') return static_cast<std::uint8_t>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<std::uint8_t>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<std::uint8_t>(c - 'A' + 10);
    throw std::invalid_argument("salt: '" + std::string(hex) + "' is not hex");
  };
  if (hex.size() % 2 != 0) {
    throw std::invalid_argument("salt: '" + std::string(hex) + "' has an odd number of digits");
  }
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<std::uint8_t>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  }
  return out;
}

}  // namespace quiesce::verity
