#!/usr/bin/env bash
# `gpack prequant` time and peak RSS on SmolLM2-135M (Q4_1 GGUF) and on the
# >= 4 GB synthetic models of bench/convert.sh (Q8_0 GGUF; F16 sharded HF
# safetensors). Goal: peak RSS <= largest layer + 64 MiB (streaming: one
# tensor or fused group at a time). Largest layer of the synthetic models
# (Llama-2-7B shapes, 4*4096^2 + 3*4096*11008 weights): 215 MB in Q8_0,
# 405 MB in F16. Warm page cache; peak RSS = /usr/bin/time %M (max RSS).
# Usage: bench/prequant.sh [GB=4.2]
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${1:-4.2}
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}/bench
TD=${CARGO_TARGET_DIR:-target}
mkdir -p "$CACHE"
# Two invocations: with --example, cargo builds only the example.
cargo build --release --locked -p gpack-cli >&2
cargo build --release --locked -p gpack-convert --example make_synthetic >&2
G=$TD/release/gpack
SYN=$TD/release/examples/make_synthetic
GG=$CACHE/synthetic-$GB.gguf
ST=$CACHE/synthetic-$GB-hf
[ -f "$GG" ] || "$SYN" gguf "$GG" "$GB"
[ -f "$ST/config.json" ] || "$SYN" safetensors "$ST" "$GB"
SMOL=$(bash scripts/fetch-models.sh)
OUT=$CACHE/prequant-out.giw
run() { # SRC QUANT TARGET
  cat "$1"/* "$1" 2>/dev/null >/dev/null || true
  local r j
  r=$(/usr/bin/time -f "%e %M" "$G" prequant "$1" -o "$OUT" --quant "$2" --target "$3" --force --json 2>/tmp/prequant-time.$$ >/tmp/prequant-json.$$; tail -1 /tmp/prequant-time.$$)
  j=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["bytes"], d["largest_payload"], d["records"], d["fused_groups"], d["weights_version"])' /tmp/prequant-json.$$)
  set -- "$@" $r $j
  printf '%-28s %-9s %-6s %7.2f s  peak RSS %6d MiB  out %6d MiB  largest record %5d MiB  records %4d  groups %3d  v%d\n' \
    "$(basename "$1")" "$2" "$3" "$4" "$(($5 / 1024))" "$(($6 / 1048576))" "$(($7 / 1048576))" "$8" "$9" "${10}"
  rm -f "$OUT" /tmp/prequant-time.$$ /tmp/prequant-json.$$
}
for Q in int8int8 int4 keep; do run "$SMOL" "$Q" cpu; done
run "$SMOL" int4 metal
for SRC in "$GG" "$ST"; do
  for Q in int8int8 int4; do run "$SRC" "$Q" cpu; done
done
