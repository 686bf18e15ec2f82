#!/usr/bin/env bash
# bench/verity_mount_seqread.sh [MIB] [RUNS] - sequential reads through `quiesce verity
# mount` (issue 27 item 7's row, by hand until `verity bench --mount` has it): one file of MIB
# MiB (default 256) read whole with 1 MiB reads, cold (page cache dropped) and warm, directly
# from SOURCE, through the mount without a sidecar (FUSE alone), and through the mount
# verified (the same bytes with a sidecar). Medians of RUNS (default 3), all in one run, and
# the two ratios the issue sets goals for. Root (drop_caches, FUSE); build/release first.
set -euo pipefail
mib="${1:-256}"
runs="${2:-3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
q="$root/build/release/bin/quiesce"
dir="$(mktemp -d /var/tmp/quiesce-seqread.XXXXXX)"
trap 'fusermount3 -u "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/src" "$dir/mnt"
head -c "$((mib << 20))" /dev/urandom >"$dir/src/plain"
cp "$dir/src/plain" "$dir/src/verified"
"$q" verity enable "$dir/src/verified" >/dev/null
"$q" verity mount "$dir/src" "$dir/mnt" 2>/dev/null

ms() {  # ms FILE: milliseconds to read FILE whole
  local t0 t1
  t0=$(date +%s%N)
  dd if="$1" of=/dev/null bs=1M status=none
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A cold warm
for name in direct:src/plain fuse:mnt/plain verified:mnt/verified; do
  key="${name%%:*}" file="$dir/${name#*:}"
  c=() w=()
  for ((i = 0; i < runs; i++)); do
    sync
    echo 3 >/proc/sys/vm/drop_caches
    c+=("$(ms "$file")")
    w+=("$(ms "$file")")
  done
  cold[$key]=$(echo "${c[*]}" | median)
  warm[$key]=$(echo "${w[*]}" | median)
  echo "$key: cold ${c[*]} ms (median ${cold[$key]}), warm ${w[*]} ms (median ${warm[$key]})"
done
awk -v vc="${cold[verified]}" -v fc="${cold[fuse]}" -v vw="${warm[verified]}" -v dw="${warm[direct]}" 'BEGIN {
  printf "verified cold vs FUSE alone cold: %.2fx (goal >= 0.9x)\n", fc / vc
  printf "verified warm vs direct warm:     %.2fx (goal >= 0.95x)\n", dw / vw }'
