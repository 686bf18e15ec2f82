// SPDX-License-Identifier: Apache-2.0
// Deliberately broken builds of quiesce::verity (tests/mutants). Each mutant removes one of
// fs-verity's guarantees; the verity test suite must fail on every one. Only the mutant
// builds define these macros. Not installed.
#pragma once

#include "../base/mutant.hpp"

namespace quiesce::verity::mutant {
// a failed libcrypto call still yields a "hash"
inline constexpr bool verity_hash_fails_open = QUIESCE_MUTANT(VERITY_HASH_FAILS_OPEN);
// a file digest unlike the trusted one passes
inline constexpr bool verity_digest_not_pinned = QUIESCE_MUTANT(VERITY_DIGEST_NOT_PINNED);
// a trusted signer's signature over another digest is accepted
inline constexpr bool verity_signature_unchecked = QUIESCE_MUTANT(VERITY_SIGNATURE_UNCHECKED);
// "require signatures" lets an unsigned file in
inline constexpr bool verity_unsigned_allowed = QUIESCE_MUTANT(VERITY_UNSIGNED_ALLOWED);
// a read from its own one-at-a-time queue's item is not refused (it deadlocks)
inline constexpr bool verity_own_queue_read = QUIESCE_MUTANT(VERITY_OWN_QUEUE_READ);
// the multi-buffer padding's length leaves out the salt
inline constexpr bool verity_mb_length_unsalted = QUIESCE_MUTANT(VERITY_MB_LENGTH_UNSALTED);
// a batched read compares only the first entry of each hash block
inline constexpr bool verity_batch_shared_unchecked = QUIESCE_MUTANT(VERITY_BATCH_SHARED_UNCHECKED);
}  // namespace quiesce::verity::mutant
