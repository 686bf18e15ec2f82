// quiesce/verity.hpp - fs-verity's Merkle tree, descriptor and file digest, byte-identical
// to fsverity-utils (`fsverity digest`), for any file on any filesystem (seed 004).
//
// Format (Documentation/filesystems/fsverity.rst):
//  - data blocks of `block_size` (the last one zero-padded) are hashed as
//    H(padded salt || block); the hashes are packed into blocks (the last one of a level
//    zero-padded), and those blocks hashed again, until a level is one block; its hash is
//    the root hash (an empty file's root is all zeros; a one-block file has no tree);
//  - the tree is stored root-most level first;
//  - the file digest is the plain hash of the 256-byte descriptor.
// Hashing uses OpenSSL's libcrypto (SHA-NI where the CPU has it).
//
// Verified reads: enable() writes a sidecar (FILE.verity: descriptor + tree); a
// verified_file reads through it, each read's blocks verified on a workqueue before any
// byte is returned (the kernel's fsverity_read_queue).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce {
class workqueue;
}

namespace quiesce::verity {

enum class hash_alg : std::uint8_t { sha256 = 1, sha512 = 2 };  // FS_VERITY_HASH_ALG_*

std::size_t digest_size(hash_alg alg) noexcept;  // 32 or 64
inline constexpr std::size_t max_digest_size = 64;
const char* to_string(hash_alg alg) noexcept;  // "sha256" or "sha512"
// "sha256" or "sha512"; throws std::invalid_argument naming the text.
hash_alg parse_hash_alg(std::string_view text);

struct params {
  hash_alg alg = hash_alg::sha256;
  std::size_t block_size = 4096;   // a power of two, >= 2 * digest size
  std::vector<std::uint8_t> salt;  // 0..32 bytes
  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

struct merkle_tree {
  params p;
  std::uint64_t data_size = 0;
  std::vector<std::uint8_t> root_hash;  // digest_size bytes
  std::vector<std::uint8_t> tree;       // root-most level first (empty for <= 1 block)
  // Per level, leaf level first: where it starts in `tree` and how many blocks it has.
  struct level {
    std::size_t offset = 0;
    std::size_t blocks = 0;
  };
  std::vector<level> levels;
};

// Builds the tree of the file at `path`, streaming it (memory bounded by the tree, not the
// file). With `wq`, level 0 is hashed in parallel by work items on it (each reads its own
// range). Throws std::system_error if the file cannot be read, std::invalid_argument for
// bad params.
merkle_tree build_tree(const std::filesystem::path& path, const params& p, workqueue* wq = nullptr);
// The same for bytes in memory.
merkle_tree build_tree(const std::uint8_t* data, std::size_t size, const params& p);

// The 256-byte fs-verity descriptor (version 1, sig_size 0).
std::array<std::uint8_t, 256> descriptor(const merkle_tree& t);
// The file digest: the hash of the descriptor with the tree's algorithm.
std::vector<std::uint8_t> file_digest(const merkle_tree& t);
// What `--for-builtin-sig` signs: "FSVerity", le16 algorithm, le16 digest size, digest.
std::vector<std::uint8_t> builtin_sig_message(const merkle_tree& t);

// Builds the tree of `file` and writes `sidecar` (default FILE.verity): the 256-byte
// descriptor, then the tree. Written atomically (temporary file + rename). Returns the tree.
merkle_tree enable(const std::filesystem::path& file, const params& p,
                   std::optional<std::filesystem::path> sidecar = {}, workqueue* wq = nullptr);

// Counters of a verified_file.
struct read_stats {
  std::uint64_t reads = 0;
  std::uint64_t blocks_verified = 0;      // data blocks hashed and checked
  std::uint64_t hash_blocks_checked = 0;  // tree blocks hashed while climbing
  std::uint64_t hash_block_hits = 0;      // climbs that stopped at an already-verified block
  std::uint64_t failures = 0;             // reads failed with EIO
  // Wall time the verification work items ran (hashing and climbing, on the workers; a
  // worker preempted meanwhile counts too): a worker's verification throughput is
  // blocks_verified * block_size / verify_ns.
  std::uint64_t verify_ns = 0;
};

// A file read through fs-verity. Thread-safe: many reader threads may read at once.
class verified_file {
 public:
  // Opens `file` and its sidecar (default FILE.verity) and checks the descriptor against
  // the file (version, algorithm, block size - at most 1 MiB, a read holds its blocks in
  // memory -, salt, size, tree size): std::system_error EINVAL/ENODATA naming what is
  // wrong. Verification runs on `verify_wq`.
  verified_file(const std::filesystem::path& file, workqueue& verify_wq,
                std::optional<std::filesystem::path> sidecar = {});
  ~verified_file();
  verified_file(const verified_file&) = delete;
  verified_file& operator=(const verified_file&) = delete;

  // Reads up to buf.size() bytes at `offset` (fewer at the end of the file): the calling
  // thread reads the blocks (the "bio"), a worker of the verification queue hashes each
  // data block and climbs the tree until a hash block verified before (a bitmap, as the
  // kernel keeps), then the read completes. A mismatch throws std::system_error(EIO) naming
  // the file and block; no unverified byte is ever copied into `buf`.
  std::size_t read(std::uint64_t offset, std::span<std::uint8_t> buf);
  std::uint64_t size() const noexcept;
  const merkle_tree& tree() const noexcept;
  read_stats stats() const noexcept;
  // The digest the sidecar's descriptor claims (hash of the descriptor).
  std::vector<std::uint8_t> digest() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

std::string to_hex(const std::vector<std::uint8_t>& bytes);
// Throws std::invalid_argument if `hex` is not an even number of hex digits.
std::vector<std::uint8_t> from_hex(std::string_view hex);

}  // namespace quiesce::verity
