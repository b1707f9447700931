#!/usr/bin/env bash
# Full verification throughput of `gpack verify` vs `sha256sum` of the same
# file, same run, warm page cache; 5 runs each, median and ratio.
# Usage: bench/verify.sh [SIZE_BYTES]   (default 1 GB synthetic file)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1000000000}
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}/bench
mkdir -p "$CACHE"
cargo build --release --locked -p gpack-cli -p gpack-format >&2
F=$CACHE/synth-$SIZE.gpack
[ -f "$F" ] || target/release/gpack-synth "$F" "$SIZE" --replace >/dev/null
cat "$F" >/dev/null  # warm the page cache
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
G=$(for i in 1 2 3 4 5; do t target/release/gpack verify "$F"; done | median)
S=$(for i in 1 2 3 4 5; do t sha256sum "$F"; done | median)
Q=$(for i in 1 2 3 4 5; do t target/release/gpack verify --quick "$F"; done | median)
GB=$(echo "$SIZE / 1000000000" | bc -l)
printf 'file: %s (%s bytes), %s cores\n' "$F" "$SIZE" "$(nproc)"
printf 'gpack verify (full):   %.3f s  %.2f GB/s\n' "$G" "$(echo "$GB / $G" | bc -l)"
printf 'sha256sum:             %.3f s  %.2f GB/s\n' "$S" "$(echo "$GB / $S" | bc -l)"
printf 'ratio sha256sum/gpack: %.2fx\n' "$(echo "$S / $G" | bc -l)"
printf 'gpack verify --quick (whole process): %.1f ms\n' "$(echo "$Q * 1000" | bc -l)"
