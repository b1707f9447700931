#!/usr/bin/env bash
# PLE table random-row reads, direct I/O (with a 256 x 8 row cache) vs mmap,
# on a ~1 GB table (larger than the cache), cold page cache each run
# (posix_fadvise DONTNEED on the file before each run). Median of RUNS.
# Usage: bench/ple.sh [GB=1] [N=20000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${1:-1}; N=${2:-20000}; RUNS=${3:-3}
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}/bench
mkdir -p "$CACHE"
cargo build --release --locked -p gpack-cli -p gpack-runtime --example make_ple --example ple_bench >&2
SRC=$CACHE/ple-$GB.gguf; OUT=$CACHE/ple-$GB.gpack
[ -f "$SRC" ] || target/release/examples/make_ple "$SRC" "$GB"
[ -f "$OUT" ] || target/release/gpack convert "$SRC" -o "$OUT" >/dev/null
evict() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$OUT"; }
for mode in mmap direct; do
  rs=()
  for _ in $(seq "$RUNS"); do
    evict
    rs+=("$(target/release/examples/ple_bench "$OUT" "$mode" "$N" | tee /dev/stderr | cut -d' ' -f1)")
  done
  printf '%s: median %s rows/s\n' "$mode" "$(printf '%s\n' "${rs[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")"
done
