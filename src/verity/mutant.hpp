// SPDX-License-Identifier: Apache-2.0
// Deliberately broken builds of quiesce::verity (tests/mutants). Each mutant removes one of
// fs-verity's guarantees; the verity test suite must fail on every one. Only the mutant
// builds define these macros. Not installed.
#pragma once

namespace quiesce::verity::mutant {
#ifdef QUIESCE_MUTANT_VERITY_HASH_FAILS_OPEN  // a failed libcrypto call still yields a "hash"
inline constexpr bool verity_hash_fails_open = true;
#else
inline constexpr bool verity_hash_fails_open = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_DIGEST_NOT_PINNED  // a file digest unlike the trusted one passes
inline constexpr bool verity_digest_not_pinned = true;
#else
inline constexpr bool verity_digest_not_pinned = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_SIGNATURE_UNCHECKED  // a trusted signer's signature over another
inline constexpr bool verity_signature_unchecked = true;  // digest is accepted
#else
inline constexpr bool verity_signature_unchecked = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_UNSIGNED_ALLOWED  // "require signatures" lets an unsigned file in
inline constexpr bool verity_unsigned_allowed = true;
#else
inline constexpr bool verity_unsigned_allowed = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_OWN_QUEUE_READ  // a read from its own one-at-a-time queue's item
inline constexpr bool verity_own_queue_read = true;  // is not refused (it deadlocks)
#else
inline constexpr bool verity_own_queue_read = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_MB_LENGTH_UNSALTED          // the multi-buffer padding's length leaves
inline constexpr bool verity_mb_length_unsalted = true;  // out the salt
#else
inline constexpr bool verity_mb_length_unsalted = false;
#endif
#ifdef QUIESCE_MUTANT_VERITY_BATCH_SHARED_UNCHECKED  // a batched read compares only the first
inline constexpr bool verity_batch_shared_unchecked = true;  // entry of each hash block
#else
inline constexpr bool verity_batch_shared_unchecked = false;
#endif
}  // namespace quiesce::verity::mutant
