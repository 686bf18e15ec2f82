// SPDX-License-Identifier: Apache-2.0
// quiesce/verity.hpp - fs-verity's Merkle tree, descriptor and file digest, byte-identical
// to fsverity-utils (`fsverity digest`), for any file on any filesystem (seed 004), and
// reads verified against a trusted file digest or a built-in signature.
//
// Format (Documentation/filesystems/fsverity.rst):
//  - data blocks of `block_size` (the last one zero-padded) are hashed as
//    H(padded salt || block); the hashes are packed into blocks (the last one of a level
//    zero-padded), and those blocks hashed again, until a level is one block; its hash is
//    the root hash (an empty file's root is all zeros; a one-block file has no tree);
//  - the tree is stored root-most level first;
//  - the file digest is the plain hash of the 256-byte descriptor (sig_size zeroed).
// Hashing uses OpenSSL's libcrypto (SHA-NI where the CPU has it). Every libcrypto call is
// checked: a hash that fails fails the build (an exception) or the read (EIO).
//
// Verified reads: enable() writes a sidecar (FILE.verity):
//    [256-byte descriptor, sig_size = N][N bytes: built-in signature][Merkle tree]
// - the descriptor followed by its signature, as the kernel's fsverity_descriptor keeps
// them, then the tree at offset 256 + sig_size (256 without a signature, as before). A
// verified_file reads through it, each read's blocks verified on a workqueue before any
// byte is returned (the kernel's fsverity_read_queue).
//
// Threat model. An attacker may rewrite the data file and its sidecar at any time -
// before the open, and between and during reads - and may put anything where either is
// expected (a FIFO, a device, a /proc file, a symlink, a huge sparse file). Trusted are:
// this process, libcrypto, and what the caller passes in a trust_policy - the expected
// file digest and the certificates. What each mode guarantees:
//  - digest pinned (trust_policy::digest): the file opens only if the sidecar's file
//    digest - the hash of its descriptor: algorithm, block size, salt, data size and root
//    hash - equals the trusted one; then every byte a read returns is the byte that digest
//    names, or the read fails with EIO. Pinning the digest, not the root hash alone, also
//    fixes the size (a file ending in zeros cannot be truncated under the same root).
//  - signatures (trust_policy::certs): a sidecar that carries a built-in signature - the
//    PKCS#7 signature of the fsverity_formatted_digest that `fsverity sign` makes - is
//    checked against the trusted certificates (the kernel's ".fs-verity" keyring: the
//    signer's certificate must be one of them; no chains, no expiry check); if it
//    verifies, reads are guaranteed as above for the signed digest. With
//    require_signatures (the kernel's fs.verity.require_signatures) a file without a valid
//    signature cannot be opened.
//  - integrity only (trust_policy::integrity_only): reads return what the sidecar's own
//    tree says, which an attacker who can rewrite the sidecar chooses: corruption is
//    detected, tampering is not. Only for a sidecar kept where no attacker can write.
// A file authenticated neither by its digest nor by a signature does not open unless the
// policy says integrity_only. Not covered: an attacker inside the process; denial of
// service by deleting or corrupting files (reads then fail, they never return wrong
// bytes); certificate expiry and revocation (certificates are trusted as given, as the
// kernel's keyring trusts its keys).
//
// Hostile files cost bounded work: only regular files on real filesystems are opened
// (never blocking on a FIFO; /proc, /sys and other pseudo filesystems refused), the
// descriptor is checked and the trust decided before the tree is read, and the tree read
// is exactly the size that the descriptor and the data file's size imply.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
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
// "sha256" or "sha512", or its number "1" or "2" (as fsverity-utils accepts); throws
// std::invalid_argument naming the text.
hash_alg parse_hash_alg(std::string_view text);

// How SHA-256 blocks are hashed here. Tree building and verified reads hash many blocks
// of one size at once; quiesce has multi-buffer kernels for that (SHA-NI with one, two or
// four messages interleaved, AVX2 with eight, AVX-512 with sixteen, and a portable one),
// and at first use measures each one this CPU runs, and OpenSSL's single-stream SHA-256,
// on 4 KiB blocks, and uses the fastest - OpenSSL itself when no kernel beats it. SHA-512
// always uses OpenSSL. QUIESCE_SHA256=<name> in the environment forces a choice.
struct sha256_choice {
  struct row {
    std::string name;      // "openssl", "scalar-x1", "shani-x2", "avx512-x16", ...
    unsigned lanes = 1;    // messages per call
    double mb_per_s = 0;   // measured at start-up; 0 when this CPU cannot run it
    std::string not_here;  // why not ("needs AVX2"), or empty
  };
  std::vector<row> rows;  // "openssl" first
  std::string chosen;     // a row's name
  std::string why;        // "the fastest of 5 measured", "QUIESCE_SHA256=shani-x2", ...
};
// Thread-safe; measured once per process (a few milliseconds), then the same answer.
const sha256_choice& sha256_hashing();
// fs-verity's largest block size here: the largest power of two that fsverity-utils takes
// (its options are ints), and that fits the descriptor's u32 sizes.
inline constexpr std::size_t max_block_size = std::size_t{1} << 30;

struct params {
  hash_alg alg = hash_alg::sha256;
  std::size_t block_size = 4096;   // a power of two, >= 2 * digest size, <= max_block_size
  std::vector<std::uint8_t> salt;  // 0..32 bytes
  // Throws std::invalid_argument naming the bad field: an algorithm other than 1 (sha256)
  // and 2 (sha512), a block size that is not a power of two in range, a salt too long.
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
// range). Throws std::system_error if the file cannot be read (EISDIR: a directory; EINVAL:
// not a regular file on a real filesystem - never blocking on a FIFO), if a hash fails
// (EIO), or if `wq`
// refuses the hashing work (ECANCELED: it is draining, or the process is exiting);
// std::invalid_argument for bad params.
merkle_tree build_tree(const std::filesystem::path& path, const params& p, workqueue* wq = nullptr);
// The same for a file the caller opened (`fd`, read with pread, its size taken now), named
// `name` in errors. `stop`, if given, is polled between 1 MiB reads: once it is true the
// build ends with std::system_error EINTR (an interrupted `fsverity enable`).
merkle_tree build_tree(int fd, const std::string& name, const params& p, workqueue* wq = nullptr,
                       const std::atomic<bool>* stop = nullptr);
// The same for bytes in memory.
merkle_tree build_tree(const std::uint8_t* data, std::size_t size, const params& p);

// The 256-byte fs-verity descriptor (version 1, sig_size 0).
std::array<std::uint8_t, 256> descriptor(const merkle_tree& t);
// The file digest: the hash of the descriptor with the tree's algorithm.
std::vector<std::uint8_t> file_digest(const merkle_tree& t);
// What `--for-builtin-sig` signs: "FSVerity", le16 algorithm, le16 digest size, digest.
std::vector<std::uint8_t> builtin_sig_message(const merkle_tree& t);

// The largest built-in signature a sidecar may carry (the kernel's
// FS_VERITY_MAX_SIGNATURE_SIZE: 16 KiB less the descriptor).
inline constexpr std::size_t max_signature_size = 16384 - 256;

// Builds the tree of `file` and writes `sidecar` (default FILE.verity): the 256-byte
// descriptor, the built-in `signature` if one is given (sig_size set to its size), then the
// tree. Written atomically (temporary file + rename). Returns the tree. Errors as
// build_tree's; a signature that is not one DER PKCS#7 SignedData, or is over
// max_signature_size, throws std::invalid_argument naming "signature". What it signs is
// not checked here: that is done when the file is opened, against the opener's
// certificates.
merkle_tree enable(const std::filesystem::path& file, const params& p,
                   std::optional<std::filesystem::path> sidecar = {}, workqueue* wq = nullptr,
                   std::span<const std::uint8_t> signature = {});

// Writes the sidecar of `t` - its descriptor (sig_size set), `signature`, the tree - to the
// open, empty file `fd` from offset 0. Throws std::system_error naming `name`;
// std::invalid_argument naming "signature" as enable() does.
void write_sidecar(int fd, const std::string& name, const merkle_tree& t,
                   std::span<const std::uint8_t> signature = {});

// A sidecar recognised by its content: the open file `fd` starts with a descriptor that a
// verified_file accepts (version 1, a known algorithm, a block size it verifies, the salt
// size, zero padding and reserved bytes, sig_size) and is exactly as long as that
// descriptor implies (256 + sig_size + the tree for its data_size). Reads 256 bytes.
struct sidecar_identity {
  std::array<std::uint8_t, 256> descriptor{};  // sig_size zeroed: what the file digest hashes
  std::uint64_t data_size = 0;
};
// nullopt if `fd` is not such a file (or cannot be read).
std::optional<sidecar_identity> probe_sidecar(int fd) noexcept;

// A file digest the caller trusts: what `fsverity digest` and `fsverity measure` print.
struct expected_digest {
  hash_alg alg = hash_alg::sha256;
  std::vector<std::uint8_t> digest;  // digest_size(alg) bytes
  // Parses "ALG:HEX" ("sha256:3d24..."); throws std::invalid_argument naming "digest" if the
  // algorithm is unknown or the hex is not exactly one digest of it.
  static expected_digest parse(std::string_view text);
};

// Trusted X.509 certificates for built-in signatures (the kernel's ".fs-verity" keyring).
// Copies share the parsed certificates; add() gives this object its own set. Opens may use
// one set from many threads at once; add() must not run meanwhile.
class trusted_certs {
 public:
  trusted_certs();
  ~trusted_certs();
  trusted_certs(const trusted_certs&);
  trusted_certs& operator=(const trusted_certs&);
  // Adds every certificate in `pem_or_der`: PEM (one or more CERTIFICATE blocks) or one DER
  // certificate. Throws std::invalid_argument naming "cert" if it holds none.
  void add(std::span<const std::uint8_t> pem_or_der);
  // The same for the file at `path` (at most 1 MiB): std::system_error if it cannot be
  // read, std::invalid_argument naming "cert" and the path if it holds no certificate.
  void add_file(const std::filesystem::path& path);
  std::size_t size() const noexcept;
  bool empty() const noexcept { return size() == 0; }

 private:
  friend struct cert_access;  // src/verity/trust.hpp
  struct impl;
  std::shared_ptr<const impl> impl_;
};

// What a verified_file trusts (see the threat model above). A file opens only if every
// check the policy names passes:
//  - digest: the sidecar's file digest (algorithm and bytes) equals it, else EKEYREJECTED;
//  - certs: a signature the sidecar carries verifies against them, else EBADMSG (not a
//    PKCS#7 signature), ENOKEY (its signer is not one of the certificates) or EKEYREJECTED
//    (it does not sign this file's digest); without certs a carried signature is not
//    looked at;
//  - require_signatures: the sidecar carries a signature that verified, else EPERM (ENOKEY
//    if the policy has no certificates);
//  - and the file is authenticated - its digest matched or its signature verified - else
//    EPERM, unless integrity_only.
// A policy that names nothing (no digest, no certs, not require_signatures, not
// integrity_only) is refused with std::invalid_argument naming "trust".
struct trust_policy {
  std::optional<expected_digest> digest;
  trusted_certs certs;
  bool require_signatures = false;
  bool integrity_only = false;

  // The file digest must be `d`.
  static trust_policy pinned(expected_digest d);
  // A valid signature by one of `c` is required.
  static trust_policy signed_by(trusted_certs c);
  // Nothing authenticated: reads are checked against the sidecar's own tree only.
  static trust_policy integrity();
};

// How an open verified_file was authenticated.
struct trust_result {
  bool digest_matched = false;      // the policy's digest equals the file's
  bool signature_verified = false;  // the sidecar's signature verified against the certs
  std::string signer;               // the signing certificate's subject, if it verified
  bool authenticated() const noexcept { return digest_matched || signature_verified; }
};

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
  // Opens `file` and its sidecar (default FILE.verity), in this order, each step bounded:
  //  1. both must be regular files on a real filesystem, opened without blocking (a FIFO, a
  //     device, a /proc or /sys file - also behind a symlink - is refused: EINVAL; a
  //     directory: EISDIR); a missing sidecar is ENODATA;
  //  2. the descriptor is checked - version 1, a known algorithm, a block size of at most
  //     1 MiB (a read holds its blocks in memory), the salt size, zero reserved and padding
  //     bytes, sig_size at most max_signature_size, data_size equal to the file's size, and
  //     the sidecar's size exactly 256 + sig_size + the tree size they imply: EINVAL naming
  //     what is wrong;
  //  3. the trust policy decides (trust_policy: its errno values);
  //  4. only then is the tree read (its size was checked in 2).
  // Throws std::system_error naming the file, std::invalid_argument for an empty policy.
  // Verification runs on `verify_wq`, which must outlive this object: while the queue is
  // being destroyed (draining) reads fail with EIO saying the queue refused the work; after
  // its destruction using this object is undefined. The second form keeps the queue alive.
  verified_file(const std::filesystem::path& file, workqueue& verify_wq, const trust_policy& trust,
                std::optional<std::filesystem::path> sidecar = {});
  verified_file(const std::filesystem::path& file, std::shared_ptr<workqueue> verify_wq,
                const trust_policy& trust, std::optional<std::filesystem::path> sidecar = {});
  // Opens from descriptors the caller opened (both duplicated; the caller keeps its own):
  // the same checks, from step 1 on, with `name` naming the file in errors. For a
  // filesystem that resolved both files itself (quiesce verity mount). A sidecar whose
  // descriptor implies a tree of more than `max_tree_bytes` is refused (std::system_error
  // EFBIG) before anything past the descriptor is read: the tree is held in memory, and
  // a sidecar someone else wrote may describe a sparse file of any size.
  verified_file(int data_fd, int sidecar_fd, const std::string& name, workqueue& verify_wq,
                const trust_policy& trust,
                std::uint64_t max_tree_bytes = std::numeric_limits<std::uint64_t>::max());
  ~verified_file();
  verified_file(const verified_file&) = delete;
  verified_file& operator=(const verified_file&) = delete;

  // Reads up to buf.size() bytes at `offset` (fewer at the end of the file): the calling
  // thread reads the blocks (the "bio"), a worker of the verification queue hashes each
  // data block and climbs the tree until a hash block verified before (a bitmap, as the
  // kernel keeps), then the read completes. No unverified byte is ever copied into `buf`,
  // and the read never waits for verification that cannot happen. Throws
  // std::system_error:
  //  - EIO naming the file and block: the block does not match the tree, or a hash of it
  //    could not be computed (libcrypto failed);
  //  - EIO naming the cause: the verification queue refused the work (it is draining, or
  //    the process is exiting), or the verification item threw (its message included);
  //  - EDEADLK: called from a work item of the verification queue itself while that queue
  //    runs one item at a time (ordered, or max_active 1): the verification could never
  //    start. With max_active N > 1, at most N - 1 of its items may read at once.
  std::size_t read(std::uint64_t offset, std::span<std::uint8_t> buf);
  // The asynchronous read, as the kernel completes a bio from its verification work item:
  // the calling thread reads the blocks and queues their verification, and returns; `done`
  // runs exactly once, on the verification queue's worker once the blocks are verified -
  // with the file's bytes at `offset` (up to `len`, fewer at the end of the file; valid
  // only during the call) and err 0 - or with err EIO and a message naming the file and
  // block or the cause (as read() throws). A read it cannot start (the blocks cannot be
  // read, the queue refuses the work) and a read at or past the end of the file complete
  // on the calling thread before read_async returns. `done` must not throw. Every read
  // must have completed before the file is destroyed.
  using read_done =
      std::function<void(std::span<const std::uint8_t> data, int err, const std::string& why)>;
  void read_async(std::uint64_t offset, std::size_t len, read_done done);
  std::uint64_t size() const noexcept;
  const merkle_tree& tree() const noexcept;
  read_stats stats() const noexcept;
  // The file digest of the sidecar's descriptor (sig_size zeroed), as `fsverity measure`.
  std::vector<std::uint8_t> digest() const;
  // The sidecar's descriptor with sig_size zeroed (the bytes the file digest hashes).
  const std::array<std::uint8_t, 256>& descriptor() const noexcept;
  // The built-in signature the sidecar carries (empty if none).
  const std::vector<std::uint8_t>& signature() const noexcept;
  // How the open was authenticated.
  const trust_result& trust() const noexcept;

 private:
  struct impl;
  struct async_read;
  std::unique_ptr<impl> impl_;
};

std::string to_hex(const std::vector<std::uint8_t>& bytes);
// Throws std::invalid_argument if `hex` is not an even number of hex digits.
std::vector<std::uint8_t> from_hex(std::string_view hex);

}  // namespace quiesce::verity
