// SPDX-License-Identifier: Apache-2.0
// Mount mutants (tests/mutants): the mount built with one deliberate defect, to show that
// the mount suites (tests/cli/verity_mount*_test.cpp) catch it. Each is false in every real
// build. Not installed.
#pragma once

#include "../base/mutant.hpp"

namespace quiesce::mount::detail::mutant {

// lookups follow a symlink (no O_NOFOLLOW)
inline constexpr bool lookup_follows = QUIESCE_MUTANT(MOUNT_LOOKUP_FOLLOWS);

// enable with writers open
inline constexpr bool enable_ignores_writers = QUIESCE_MUTANT(MOUNT_ENABLE_IGNORES_WRITERS);

// an enable keeps the plain pages cached
inline constexpr bool no_invalidate = QUIESCE_MUTANT(MOUNT_NO_INVALIDATE);

// a plain node's open ignores a new sidecar
inline constexpr bool no_recheck = QUIESCE_MUTANT(MOUNT_NO_RECHECK);

// a kept tree serves its inode's next descriptor
inline constexpr bool stale_tree = QUIESCE_MUTANT(MOUNT_STALE_TREE);

// a sidecar's tree is read whatever its size, and trees held at once are not bounded
inline constexpr bool trees_unbounded = QUIESCE_MUTANT(MOUNT_TREES_UNBOUNDED);

// a write by the daemon on a caller's behalf keeps a set-group-ID bit the kernel would drop
// (the FUSE client's older rule alone)
inline constexpr bool sgid_old_rule = QUIESCE_MUTANT(MOUNT_SGID_OLD_RULE);

// lookups ignore the inode record (a hard link made in SOURCE to a verity file reads plain)
inline constexpr bool no_inode_record = QUIESCE_MUTANT(MOUNT_NO_INODE_RECORD);

// only an enable writes the inode record: a lookup that finds a sidecar beside a name leaves
// an inode without one as it is (a file enabled before records existed keeps a hard link
// made in SOURCE plain to a fresh mount)
inline constexpr bool record_only_on_enable = QUIESCE_MUTANT(MOUNT_RECORD_ONLY_ON_ENABLE);

// removing a name through the mount removes the sidecar beside it although the file keeps
// other names (a hard link made in SOURCE then reads plain to a fresh mount)
inline constexpr bool unlink_drops_sidecar = QUIESCE_MUTANT(MOUNT_UNLINK_DROPS_SIDECAR);

// a file with several names is enabled where no inode record can be kept (its other names
// then read plain)
inline constexpr bool several_names_unrecorded = QUIESCE_MUTANT(MOUNT_SEVERAL_NAMES_UNRECORDED);

// removing a verity name whose inode record resolves to nothing (its sidecar replaced by a
// copy in SOURCE) drops the sidecar instead of recording and keeping it
inline constexpr bool record_not_repaired = QUIESCE_MUTANT(MOUNT_RECORD_NOT_REPAIRED);

// the last name of a file removed in another directory than the one its sidecar was kept in
// leaves the kept sidecar there (that directory is then never empty to the mount)
inline constexpr bool kept_left_elsewhere = QUIESCE_MUTANT(MOUNT_KEPT_LEFT_ELSEWHERE);

// the directory a sidecar was kept in is followed wherever it is now, out of SOURCE too
inline constexpr bool kept_followed_outside = QUIESCE_MUTANT(MOUNT_KEPT_FOLLOWED_OUTSIDE);

// an enable of a file with several names stands although its inode record could not be
// written (its other names then read plain to a fresh mount)
inline constexpr bool record_failure_kept = QUIESCE_MUTANT(MOUNT_RECORD_FAILURE_KEPT);

// a name's removal that keeps the sidecar does not look at the file's link count again: a
// last name removed meanwhile (through another mount), before the note of where the sidecar
// was kept, leaves it behind
inline constexpr bool keeper_not_rechecked = QUIESCE_MUTANT(MOUNT_KEEPER_NOT_RECHECKED);

// the auto_unmount watcher looks at the mount at once instead of waiting for the daemon to
// end (a daemon killed later leaves its mount, as libfuse's fusermount3 may)
inline constexpr bool watcher_does_not_wait = QUIESCE_MUTANT(MOUNT_WATCHER_DOES_NOT_WAIT);

// the auto_unmount watcher unmounts whatever is mounted at the mountpoint once the daemon has
// ended, its connection over or not (what was mounted there after a clean exit too)
inline constexpr bool watcher_unmounts_blindly = QUIESCE_MUTANT(MOUNT_WATCHER_UNMOUNTS_BLINDLY);

// the auto_unmount watcher looks at and unmounts the mountpoint's path, walked again (a
// directory above it replaced by a symlink sends it elsewhere)
inline constexpr bool watcher_walks_path = QUIESCE_MUTANT(MOUNT_WATCHER_WALKS_PATH);
// a background mount says it is ready (the command returns) before its auto_unmount watcher
// exists
inline constexpr bool ready_before_watcher = QUIESCE_MUTANT(MOUNT_READY_BEFORE_WATCHER);

}  // namespace quiesce::mount::detail::mutant
