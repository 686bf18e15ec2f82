// SPDX-License-Identifier: Apache-2.0
// Where each level of a file's Merkle tree lives in the tree bytes, from the data size and
// the parameters alone - the layout the tree builder writes and the verifier expects
// (../shared/reference: levels stored root-most first, each padded to whole blocks).
// Not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "quiesce/verity.hpp"

namespace quiesce::verity::detail {

struct merkle_layout {
  std::vector<merkle_tree::level> levels;  // leaf level first (empty for <= 1 data block)
  std::uint64_t tree_bytes = 0;            // all levels
};

// The layout for `data_size` bytes hashed with `p` (p validated).
inline merkle_layout layout_of(std::uint64_t data_size, const params& p) {
  const std::uint64_t per_block = p.block_size / digest_size(p.alg);
  std::vector<std::uint64_t> blocks;  // per level, leaf level first
  for (std::uint64_t n = (data_size + p.block_size - 1) / p.block_size; n > 1;) {
    n = (n + per_block - 1) / per_block;
    blocks.push_back(n);
  }
  merkle_layout l;
  l.levels.resize(blocks.size());
  for (std::size_t i = blocks.size(); i-- > 0;) {  // stored root-most first
    l.levels[i] = {static_cast<std::size_t>(l.tree_bytes), static_cast<std::size_t>(blocks[i])};
    l.tree_bytes += blocks[i] * p.block_size;
  }
  return l;
}

}  // namespace quiesce::verity::detail
