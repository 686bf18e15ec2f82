#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# killed.sh SECONDS PROGRAM ARGS... - runs the test suite built against a mutant. Exits 0
# (the mutant is killed) if the suite fails in any way - a failing test, an abort, a crash,
# or no answer within SECONDS - and 1 (the mutant survived: a guarantee no test checks) if
# it passes. Prints the end of the suite's output, which names the test that killed it.
seconds="$1"
shift
out="$(mktemp)"
timeout -s KILL "$seconds" "$@" >"$out" 2>&1
rc=$?
tail -n 25 "$out"
rm -f "$out"
if [ "$rc" -eq 0 ]; then
  echo "SURVIVED: the suite passed against this mutant"
  exit 1
fi
echo "killed: the suite failed (exit status $rc)"
exit 0
