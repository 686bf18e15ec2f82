// SPDX-License-Identifier: Apache-2.0
// Mutant switches (tests/mutants): QUIESCE_MUTANT(NAME) is `true` in the one deliberately
// broken build that defines QUIESCE_MUTANT_NAME (the mutant CMake function passes
// -DQUIESCE_MUTANT_NAME, i.e. defined as 1) and `false` in every other build, so that a
// module declares each of its mutants in one line:
//
//   inline constexpr bool flush_ignores_pending = QUIESCE_MUTANT(FLUSH_IGNORES_PENDING);
//
// and tests the constant with `if constexpr`, which leaves no trace in a normal build.
// (The expansion is the kernel's IS_ENABLED() trick, include/linux/kconfig.h: a name
// defined as 1 pastes into a placeholder that contributes an extra argument.) Not installed.
#pragma once

#define QUIESCE_MUTANT(NAME) QUIESCE_MUTANT_IS_ONE_(QUIESCE_MUTANT_##NAME)
#define QUIESCE_MUTANT_IS_ONE_(value) QUIESCE_MUTANT_IS_ONE__(value)
#define QUIESCE_MUTANT_IS_ONE__(value) QUIESCE_MUTANT_PICK_(QUIESCE_MUTANT_PLACEHOLDER_##value)
#define QUIESCE_MUTANT_PLACEHOLDER_1 0,
#define QUIESCE_MUTANT_PICK_(placeholder_or_junk) \
  QUIESCE_MUTANT_SECOND_(placeholder_or_junk true, false, )
#define QUIESCE_MUTANT_SECOND_(ignored, value, ...) value
