// SPDX-License-Identifier: Apache-2.0
// Files written whole or not at all (base layer): the reports, traces, Merkle trees and
// fs-verity sidecars that quiesce writes. Internal (the CLI, the experiments and the host
// layer use it too); not installed.
#pragma once

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace quiesce {

// Writes `parts`, concatenated, to `path` so that a reader sees either the old file or the
// whole new one, and a failure leaves `path` as it was:
//  - the temporary is created in `path`'s directory under an unpredictable name with
//    O_CREAT | O_EXCL | O_NOFOLLOW (a planted file or symlink is never opened, let alone
//    followed), mode 0666 less the umask;
//  - it is written, fsync'd, then renamed over `path` (a symlink at `path` is replaced,
//    not followed);
//  - on any failure the temporary is removed and std::system_error names `path` and the
//    reason.
// For files quiesce keeps beside others' (sidecars): nothing at `path` is ever opened.
void write_file_atomically(const std::filesystem::path& path,
                           std::initializer_list<std::string_view> parts);

// An output file the user named on the command line (`verity digest --out-descriptor`,
// `--trace`): written atomically as above, except where `path` names a stream - a device or
// a FIFO, after symlinks (/dev/null, /dev/stdout) - which is opened and written in place,
// as fsverity-utils writes its outputs. A stream has no old version to keep, and a rename
// would put a regular file where the device was: run as root, `verity digest
// --out-descriptor=/dev/null` once replaced the machine's /dev/null so. If what the open
// finds is a regular file after all (the path changed since it was looked at), nothing is
// written through it and it is replaced atomically. Not for paths another user controls
// (a planted symlink to a device would be followed): write_file_atomically.
void write_output_file(const std::filesystem::path& path,
                       std::initializer_list<std::string_view> parts);

// The whole of `path` - a file of any size the kernel reports, /proc and /sys files
// included (read until end of file, not by their size) - up to `limit` bytes. Throws
// std::system_error naming `path` and the reason if it cannot be opened or read, or holds
// more than `limit` bytes.
std::string read_file(const std::filesystem::path& path, std::size_t limit = std::size_t{64} << 20);

}  // namespace quiesce
