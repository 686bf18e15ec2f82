// SPDX-License-Identifier: Apache-2.0
// The one way quiesce ends the process on a broken invariant or an operation that cannot
// fail safely (liburcu's urcu_die, the kernel's BUG()): "quiesce: MESSAGE" on stderr, then
// abort(). Used where returning - as if a noexcept primitive had succeeded - would be worse
// than stopping. Not installed.
#pragma once

namespace quiesce::detail {

// printf-style; formats into a buffer on the stack (a message longer than 1 KiB is cut),
// writes it with one write(2) and aborts: it never allocates and takes no lock, so it is
// safe with the heap or a runtime lock in any state, and in a forked child.
[[noreturn]] void die(const char* format, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace quiesce::detail
