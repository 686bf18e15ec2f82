// SPDX-License-Identifier: Apache-2.0
// Deciding whether an fs-verity file is trusted: the expected digest and the built-in
// signature (PKCS#7 over the fsverity_formatted_digest, checked with libcrypto against the
// trusted certificates, as the kernel's fs/verity/signature.c checks it against its
// ".fs-verity" keyring). Not installed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quiesce/verity.hpp"

namespace quiesce::verity {

struct cert_access;

namespace detail {

// What `fsverity sign` signs for `digest` (fsverity_formatted_digest): "FSVerity", le16
// algorithm, le16 digest size, the digest.
std::vector<std::uint8_t> formatted_digest(hash_alg alg, std::span<const std::uint8_t> digest);

// True if `sig` parses as one DER PKCS#7 SignedData and nothing more.
bool is_pkcs7_signature(std::span<const std::uint8_t> sig);

// Checks `policy` for a file whose descriptor hashes to `digest` (with `alg`) and whose
// sidecar carries `signature` (empty: none). Returns how it was authenticated; throws
// std::system_error naming `what` with the errno trust_policy documents, or
// std::invalid_argument for a policy that names nothing.
trust_result check_trust(const trust_policy& policy, hash_alg alg,
                         std::span<const std::uint8_t> digest,
                         std::span<const std::uint8_t> signature, const std::string& what);

}  // namespace detail
}  // namespace quiesce::verity
