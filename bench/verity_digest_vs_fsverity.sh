#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# quiesce verity digest against fsverity-utils' fsverity digest on one page-cached file:
# ROUNDS rounds, each timing `fsverity digest`, then ours on both cores, then ours with
# --single-thread (interleaved, so drift of a noisy machine hits all three alike); prints
# each round's seconds and the medians' ratios (awk; no other tool). The digests must agree.
# Usage: bench/verity_digest_vs_fsverity.sh [FILE_MIB (1024)] [ROUNDS (3)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
Q=${QUIESCE:-$here/build/release/bin/quiesce}
mib=${1:-1024}
rounds=${2:-3}
command -v fsverity > /dev/null || { echo "fsverity (fsverity-utils) is not installed" >&2; exit 2; }
[ -x "$Q" ] || { echo "$Q is not built (./quiesce build)" >&2; exit 2; }
f=$(mktemp "${TMPDIR:-/tmp}/quiesce-digest-XXXXXX")
trap 'rm -f "$f"' EXIT
head -c $((mib << 20)) /dev/urandom > "$f"
cat "$f" > /dev/null  # page-cached
[ "$(fsverity digest "$f")" = "$("$Q" verity digest "$f")" ] || { echo "digests differ" >&2; exit 1; }
usecs() { local s e; s=$(date +%s%N); "$@" > /dev/null; e=$(date +%s%N); echo $(((e - s) / 1000)); }
declare -a a b c
for ((r = 0; r < rounds; r++)); do
  a+=("$(usecs fsverity digest "$f")")
  b+=("$(usecs "$Q" verity digest "$f")")
  c+=("$(usecs "$Q" verity digest --single-thread "$f")")
  awk -v r=$((r + 1)) -v a="${a[r]}" -v b="${b[r]}" -v c="${c[r]}" 'BEGIN {
    printf "round %d: fsverity %.3f s, quiesce %.3f s, quiesce --single-thread %.3f s\n", r, a / 1e6, b / 1e6, c / 1e6 }'
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ma=$(median "${a[@]}"); mb=$(median "${b[@]}"); mc=$(median "${c[@]}")
awk -v mib="$mib" -v n="$rounds" -v a="$ma" -v b="$mb" -v c="$mc" 'BEGIN {
  printf "%d MiB, medians of %d: fsverity %.3f s; quiesce %.3f s (%.2fx); --single-thread %.3f s (%.2fx)\n",
    mib, n, a / 1e6, b / 1e6, a / b, c / 1e6, a / c }'
