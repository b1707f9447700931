#!/usr/bin/env bash
# Routed experts: resident cache vs direct mmap (issue: MoE experts and the PLE table).
# Usage: bench/moe.sh [LAYERS] [EXPERTS] [REPS]
#   A synthetic qwen3moe (crates/runtime/examples/make_moe.rs: the tiny MoE fixture's
#   architecture scaled up; default 8 layers x 64 experts, 8 routed, Q8_0, ~1.4 GB) is
#   made once in ${GPACK_CACHE:-~/.cache/gpack}/bench and converted to a .gpack with
#   embedded experts. Then, each in its own process, REPS (default 3) runs of 32 prompt
#   tokens + 64 generated tokens in three modes:
#     resident, budget = 1/4 of the expert bytes (the model does not fit: LRU evicts);
#     resident, budget = all experts (everything cached after its first use);
#     mmap (kernels read the mapped slices, nothing copied).
#   Printed: medians of prompt and generation tokens/s, peak RSS, anonymous RSS, file-
#   backed RSS, decode hit rate and expert bytes read/loaded per generated token.
# The page cache is warm (the file was just written); run on an idle machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
LAYERS=${1:-8}
EXPERTS=${2:-64}
REPS=${3:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/h-moe}
cargo build -q --release -p gpack-runtime --example make_moe --example moe_bench --manifest-path "$ROOT/Cargo.toml"
cargo build -q --release -p gpack-cli --manifest-path "$ROOT/Cargo.toml"
EX=$CARGO_TARGET_DIR/release/examples
mkdir -p "$CACHE/bench"
GGUF=$CACHE/bench/moe-synth-$LAYERS-$EXPERTS.gguf
GPACK=$CACHE/bench/moe-synth-$LAYERS-$EXPERTS.gpack
[ -f "$GGUF" ] || "$EX/make_moe" "$GGUF" "$LAYERS" "$EXPERTS"
[ -f "$GPACK" ] || "$CARGO_TARGET_DIR/release/gpack" convert "$GGUF" -o "$GPACK" >/dev/null
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model: $GPACK ($(stat -c %s "$GPACK") bytes)"
EXPERT_BYTES=$(GPACK_THREADS=2 "$EX/moe_bench" "$GPACK" mmap -p 1 -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["expert_bytes"])')
QUARTER=$((EXPERT_BYTES / 4))
ALL=$((EXPERT_BYTES * 2))
run_mode() { # label, args...
  local label=$1; shift
  for _ in $(seq "$REPS"); do GPACK_THREADS=2 "$EX/moe_bench" "$GPACK" "$@"; done |
    python3 "$ROOT/bench/moe_summary.py" "$label"
}
echo "expert bytes: $EXPERT_BYTES; medians of $REPS runs, 2 threads"
echo
echo "| mode | prompt tok/s | gen tok/s | peak RSS MiB | anon MiB | file MiB | decode hit rate | MiB read / loaded per token |"
echo "|---|---|---|---|---|---|---|---|"
run_mode "resident, budget 1/4 of experts" resident "$QUARTER"
run_mode "resident, budget ≥ all experts" resident "$ALL"
run_mode "mmap" mmap
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
