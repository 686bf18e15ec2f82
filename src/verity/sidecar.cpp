// SPDX-License-Identifier: Apache-2.0
// The sidecar (FILE.verity): the descriptor with its sig_size, the built-in signature, then
// the Merkle tree. The descriptor is checked before anything else is read.
#include "sidecar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "regular_file.hpp"

namespace quiesce::verity::detail {

namespace {

std::uint64_t le(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

bool all_zero(const std::uint8_t* from, const std::uint8_t* to) {
  return std::all_of(from, to, [](std::uint8_t b) { return b == 0; });
}

}  // namespace

sidecar_header read_header(int fd, std::uint64_t side_size, std::uint64_t file_size,
                           const std::string& name) {
  if (side_size < descriptor_size) fail(EINVAL, name + ": shorter than a descriptor");
  std::array<std::uint8_t, descriptor_size> desc{};
  if (const int err = pread_exact(fd, desc.data(), desc.size(), 0)) fail(err, name);
  sidecar_header h;
  if (desc[0] != 1) fail(EINVAL, name + ": descriptor version is not 1");
  if (desc[1] != 1 && desc[1] != 2) fail(EINVAL, name + ": unknown hash algorithm");
  if (desc[3] > 32) fail(EINVAL, name + ": salt over 32 bytes");
  // A read holds its blocks in memory: a hostile sidecar must not make that a gigabyte.
  if (desc[2] > max_verified_log_block) {
    fail(EINVAL, fmt::format("{}: block size 2^{} is over the 2^{} verified reads accept", name,
                             desc[2], max_verified_log_block));
  }
  h.p.alg = static_cast<hash_alg>(desc[1]);
  h.p.block_size = std::size_t{1} << desc[2];
  h.p.salt.assign(desc.begin() + 80, desc.begin() + 80 + desc[3]);
  try {
    h.p.validate();
  } catch (const std::invalid_argument& e) {
    fail(EINVAL, name + ": " + e.what());
  }
  const std::size_t d = digest_size(h.p.alg);
  // Padding and reserved bytes: zero, as the kernel requires of __reserved (and the
  // digest's and salt's unused tails, which the file digest covers too).
  if (!all_zero(&desc[16 + d], &desc[80])) fail(EINVAL, name + ": root hash padding is not zero");
  if (!all_zero(&desc[80 + desc[3]], &desc[112])) fail(EINVAL, name + ": salt padding is not zero");
  if (!all_zero(&desc[112], desc.data() + desc.size())) {
    fail(EINVAL, name + ": reserved bytes in the descriptor are not zero");
  }
  h.sig_size = static_cast<std::uint32_t>(le(&desc[4], 4));
  if (h.sig_size > max_signature_size) {
    fail(EINVAL, fmt::format("{}: sig_size {} is over the {} a signature may have", name,
                             h.sig_size, max_signature_size));
  }
  h.data_size = le(&desc[8], 8);
  if (h.data_size != file_size) {
    fail(EINVAL, fmt::format("{}: descriptor's data size {} differs from the file's {}", name,
                             h.data_size, file_size));
  }
  h.root_hash.assign(desc.begin() + 16, desc.begin() + 16 + static_cast<std::ptrdiff_t>(d));
  // The sizes the descriptor implies, against the sidecar's: nothing missing, nothing extra.
  h.layout = layout_of(h.data_size, h.p);
  const std::uint64_t want = h.tree_offset() + h.layout.tree_bytes;
  if (side_size != want) {
    fail(EINVAL, fmt::format("{}: {} bytes, the descriptor implies {} (256 + a {}-byte signature "
                             "+ a {}-byte tree)",
                             name, side_size, want, h.sig_size, h.layout.tree_bytes));
  }
  h.hashed = desc;
  std::fill(&h.hashed[4], &h.hashed[8], 0);  // the file digest is of sig_size zero
  return h;
}

std::vector<std::uint8_t> read_signature(int fd, const sidecar_header& h, const std::string& name) {
  std::vector<std::uint8_t> sig(h.sig_size);
  if (const int err = pread_exact(fd, sig.data(), sig.size(), descriptor_size)) fail(err, name);
  return sig;
}

std::vector<std::uint8_t> read_tree(int fd, const sidecar_header& h, const std::string& name) {
  std::vector<std::uint8_t> tree(static_cast<std::size_t>(h.layout.tree_bytes));
  if (const int err = pread_exact(fd, tree.data(), tree.size(), h.tree_offset())) fail(err, name);
  return tree;
}

std::vector<std::uint8_t> sidecar_prefix(const std::array<std::uint8_t, descriptor_size>& desc,
                                         std::span<const std::uint8_t> signature) {
  std::vector<std::uint8_t> out(desc.begin(), desc.end());
  const auto n = static_cast<std::uint32_t>(signature.size());
  for (int i = 0; i < 4; ++i)
    out[4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  out.insert(out.end(), signature.begin(), signature.end());
  return out;
}

}  // namespace quiesce::verity::detail
