#!/usr/bin/env bash
# Convert throughput and peak memory on >= 4 GB synthetic models (GGUF and a
# sharded safetensors directory), against `cp` + `sha256sum` of the same bytes
# in the same run (goal: convert <= 1.3x their time; peak RSS < 256 MiB +
# the largest tensor). Warm page cache; median of RUNS runs.
# Usage: bench/convert.sh [GB=4.2] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${1:-4.2}
RUNS=${2:-3}
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}/bench
mkdir -p "$CACHE"
cargo build --release --locked -p gpack-cli -p gpack-convert --example make_synthetic >&2
G=target/release/gpack
SYN=target/release/examples/make_synthetic
GG=$CACHE/synthetic-$GB.gguf
ST=$CACHE/synthetic-$GB-hf
[ -f "$GG" ] || "$SYN" gguf "$GG" "$GB"
[ -f "$ST/config.json" ] || "$SYN" safetensors "$ST" "$GB"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
bytes_of() { du -sb "$1" | cut -f1; }
for SRC in "$GG" "$ST"; do
  OUT=$CACHE/out.gpack
  cat "$SRC"/* "$SRC" 2>/dev/null >/dev/null || true
  CONV=(); RSS=()
  for _ in $(seq "$RUNS"); do
    r=$(/usr/bin/time -f "%e %M" "$G" convert "$SRC" -o "$OUT" --force 2>&1 >/dev/null | tail -1)
    CONV+=("${r% *}"); RSS+=("${r#* }")
  done
  CP=()
  for _ in $(seq "$RUNS"); do
    s=$(date +%s.%N)
    if [ -d "$SRC" ]; then cp -r "$SRC" "$CACHE/copy"; sha256sum "$CACHE"/copy/* >/dev/null; rm -rf "$CACHE/copy"
    else cp "$SRC" "$CACHE/copy"; sha256sum "$CACHE/copy" >/dev/null; rm -f "$CACHE/copy"; fi
    e=$(date +%s.%N); CP+=("$(echo "$e - $s" | bc -l)")
  done
  c=$(printf '%s\n' "${CONV[@]}" | median); p=$(printf '%s\n' "${CP[@]}" | median)
  rss=$(printf '%s\n' "${RSS[@]}" | sort -n | tail -1)
  largest=$("$G" inspect "$OUT" --json | python3 -c 'import json,sys; print(max(t["size"] for t in json.load(sys.stdin)["tensors"]))')
  printf '%s: %s bytes in; convert %.2f s (min-max %s), cp+sha256sum %.2f s, ratio %.2fx; peak RSS %d MiB (largest tensor %d MiB)\n' \
    "$(basename "$SRC")" "$(bytes_of "$SRC")" "$c" "$(printf '%s\n' "${CONV[@]}" | sort -n | sed -n '1p;$p' | paste -sd-)" "$p" \
    "$(echo "$c / $p" | bc -l)" "$((rss / 1024))" "$((largest / 1048576))"
  rm -f "$OUT"
done
