// SPDX-License-Identifier: Apache-2.0
// Mount mutants (tests/mutants): the mount built with one deliberate defect, to show that
// the mount suites (tests/cli/verity_mount*_test.cpp) catch it. Each is false in every real
// build. Not installed.
#pragma once

namespace quiesce::mount::detail::mutant {

#ifdef QUIESCE_MUTANT_MOUNT_LOOKUP_FOLLOWS
inline constexpr bool lookup_follows = true;  // lookups follow a symlink (no O_NOFOLLOW)
#else
inline constexpr bool lookup_follows = false;
#endif

#ifdef QUIESCE_MUTANT_MOUNT_ENABLE_IGNORES_WRITERS
inline constexpr bool enable_ignores_writers = true;  // enable with writers open
#else
inline constexpr bool enable_ignores_writers = false;
#endif

#ifdef QUIESCE_MUTANT_MOUNT_NO_INVALIDATE
inline constexpr bool no_invalidate = true;  // an enable keeps the plain pages cached
#else
inline constexpr bool no_invalidate = false;
#endif

#ifdef QUIESCE_MUTANT_MOUNT_NO_RECHECK
inline constexpr bool no_recheck = true;  // a plain node's open ignores a new sidecar
#else
inline constexpr bool no_recheck = false;
#endif

#ifdef QUIESCE_MUTANT_MOUNT_STALE_TREE
inline constexpr bool stale_tree = true;  // a kept tree serves its inode's next descriptor
#else
inline constexpr bool stale_tree = false;
#endif

}  // namespace quiesce::mount::detail::mutant
