// SPDX-License-Identifier: Apache-2.0
// Clang thread-safety annotations (-Wthread-safety), so that the protection legends are
// checked by the compiler where it can express them (abseil's ABSL_GUARDED_BY is the
// model). Under other compilers they expand to nothing. The annotated mutex and guards are
// in mutex.hpp. Not installed.
#pragma once

#if defined(__clang__)
#define QUIESCE_TSA(x) __attribute__((x))
#else
#define QUIESCE_TSA(x)
#endif

#define QUIESCE_CAPABILITY(x) QUIESCE_TSA(capability(x))
#define QUIESCE_SCOPED_CAPABILITY QUIESCE_TSA(scoped_lockable)
#define QUIESCE_GUARDED_BY(x) QUIESCE_TSA(guarded_by(x))
#define QUIESCE_PT_GUARDED_BY(x) QUIESCE_TSA(pt_guarded_by(x))
#define QUIESCE_REQUIRES(...) QUIESCE_TSA(requires_capability(__VA_ARGS__))
#define QUIESCE_ACQUIRE(...) QUIESCE_TSA(acquire_capability(__VA_ARGS__))
#define QUIESCE_RELEASE(...) QUIESCE_TSA(release_capability(__VA_ARGS__))
#define QUIESCE_TRY_ACQUIRE(...) QUIESCE_TSA(try_acquire_capability(__VA_ARGS__))
#define QUIESCE_EXCLUDES(...) QUIESCE_TSA(locks_excluded(__VA_ARGS__))
#define QUIESCE_ASSERT_CAPABILITY(x) QUIESCE_TSA(assert_capability(x))
#define QUIESCE_RETURN_CAPABILITY(x) QUIESCE_TSA(lock_returned(x))
#define QUIESCE_NO_THREAD_SAFETY_ANALYSIS QUIESCE_TSA(no_thread_safety_analysis)
