// SPDX-License-Identifier: Apache-2.0
// The sidecar file (FILE.verity) - [descriptor][signature][tree] - written and read back.
// Reading checks the descriptor before anything else is read, and reads exactly the sizes
// it implies. Not installed.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "merkle_layout.hpp"
#include "quiesce/verity.hpp"

namespace quiesce::verity::detail {

inline constexpr std::size_t descriptor_size = 256;
inline constexpr int max_verified_log_block = 20;  // 1 MiB: a read holds its blocks

// A sidecar's descriptor, checked, and where the rest of the sidecar lies.
struct sidecar_header {
  std::array<std::uint8_t, descriptor_size> hashed{};  // the descriptor, sig_size zeroed
  params p;
  std::uint64_t data_size = 0;
  std::vector<std::uint8_t> root_hash;  // digest_size bytes
  std::uint32_t sig_size = 0;
  merkle_layout layout;  // levels and the tree's size
  std::uint64_t tree_offset() const noexcept { return descriptor_size + sig_size; }
};

// Reads the descriptor of the sidecar open on `fd` (`side_size` bytes, named `name`) and
// checks it - version, algorithm, block size (at most 2^max_verified_log_block), salt size,
// zero padding and reserved bytes, sig_size, data_size == `file_size`, and `side_size` ==
// 256 + sig_size + the implied tree size - reading nothing else. Throws std::system_error
// EINVAL naming what is wrong (or the read's errno).
sidecar_header read_header(int fd, std::uint64_t side_size, std::uint64_t file_size,
                           const std::string& name);
// The signature (sig_size bytes after the descriptor).
std::vector<std::uint8_t> read_signature(int fd, const sidecar_header& h, const std::string& name);
// The tree (layout.tree_bytes bytes at tree_offset()).
std::vector<std::uint8_t> read_tree(int fd, const sidecar_header& h, const std::string& name);

// The sidecar's first part: `desc` (sig_size zero) with sig_size set, then `signature`.
std::vector<std::uint8_t> sidecar_prefix(const std::array<std::uint8_t, descriptor_size>& desc,
                                         std::span<const std::uint8_t> signature);

}  // namespace quiesce::verity::detail
