#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# killed.sh SECONDS [--first FILTER [--first-deadline S]] PROGRAM ARGS... - runs the test
# suite built against a mutant. Exits 0 (the mutant is killed) if the suite fails in any way
# - a failing test, an abort, a crash, or no answer within SECONDS - and 1 (the mutant
# survived: a guarantee no test checks) if it passes. With --first, the tests FILTER names (a
# --gtest_filter, those known to kill the mutant) run first, and the whole suite only if
# they pass: a mutant that only hangs a test is killed by that test's deadline without the
# rest of the suite running before it; one its known killers miss still meets every test.
# --first-deadline: those tests' own deadline (QUIESCE_TEST_DEADLINE_S) while they run first
# - they are short, so a hang among them is cut sooner than one in the whole suite. Prints
# what failed. A suite whose every test skipped - or whose known killers all skipped and
# whose other tests pass - prints "ALL SKIPPED" (exit 1; CTest may skip on it); a suite that
# could not be started at all exits 2.
seconds="$1"
shift
first=""
first_deadline=""
if [ "$1" = "--first" ]; then
  first="$2"
  shift 2
  if [ "$1" = "--first-deadline" ]; then
    first_deadline="$2"
    shift 2
  fi
fi
suite_deadline="${QUIESCE_TEST_DEADLINE_S:-}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# run ARGS...: the suite with ARGS appended (a later --gtest_filter replaces an earlier one);
# prints the lines naming a failure above the end of its output, then that end; returns its
# exit status.
run() {
  timeout -s KILL "$seconds" "$@" >"$out" 2>&1
  rc=$?
  case "$rc" in
    125 | 126 | 127)  # timeout or the program could not be run: no verdict
      cat "$out"
      echo "killed.sh: could not run $1 (exit status $rc)"
      exit 2
      ;;
  esac
  head -n -15 "$out" | grep -E '^\[  FAILED  \]|did not finish within|Failure$' | head -n 10
  tail -n 15 "$out"
  return "$rc"
}

# all_skipped: whether the last run passed no test and skipped some.
all_skipped() {
  grep -q '^\[  PASSED  \] 0 tests' "$out" && grep -q '^\[  SKIPPED \]' "$out"
}

if [ -n "$first" ]; then
  # The known killers are short tests: their own deadline (QUIESCE_TEST_DEADLINE_S) may be
  # shorter than the whole suite's, so a mutant that hangs one is killed sooner.
  if [ -n "$first_deadline" ]; then
    QUIESCE_TEST_DEADLINE_S="$first_deadline"
    export QUIESCE_TEST_DEADLINE_S
  fi
  if ! run "$@" --gtest_filter="$first"; then
    echo "killed: the tests known to kill it failed (exit status $rc; $first)"
    exit 0
  fi
  if grep -q '^\[==========\] 0 tests' "$out"; then
    echo "warning: --first $first names no test of the suite"
  fi
  first_skipped=""
  if all_skipped; then first_skipped=yes; fi
  echo "the tests known to kill it passed ($first): the whole suite"
  if [ -n "$first_deadline" ]; then
    QUIESCE_TEST_DEADLINE_S="$suite_deadline"
    export QUIESCE_TEST_DEADLINE_S
  fi
fi
if run "$@"; then
  if all_skipped; then
    echo "ALL SKIPPED: no test of the suite could run here (a mutant test may skip on this)"
    exit 1
  fi
  if [ -n "$first_skipped" ]; then
    echo "ALL SKIPPED: the tests known to kill it could not run here ($first), and the rest" \
      "of the suite does not kill it (a mutant test may skip on this)"
    exit 1
  fi
  echo "SURVIVED: the suite passed against this mutant"
  exit 1
fi
echo "killed: the suite failed (exit status $rc)"
exit 0
