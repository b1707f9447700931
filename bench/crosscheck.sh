#!/usr/bin/env bash
# Real-shape correctness against llama.cpp where no transformers reference exists: the
# KL-divergence of gpack's logits from llama.cpp's on the same Q8_0 GGUF of a synthetic
# model (random weights at a real model's shape, scripts/make-synthetic-llama.py with
# SmolLM2's tokenizer), with a bound per shape (one real shape per family), and mutation tests proving each bound
# can fail: a moderate graph error (RoPE base, norm epsilon, soft-cap), made by editing the
# GGUF's metadata in place for gpack only (llama.cpp's logits are saved before, the value
# restored after), must push the KL above the bound.
#   1. llama-perplexity -m Q8_0.gguf -f testdata/perplexity/corpus.txt -c 256 --chunks 2
#      --kl-divergence-base BASE (llama.cpp's log-probs of 254 positions);
#   2. gpack perplexity Q8_0.gguf --kl-divergence --kl-divergence-base BASE: mean KL per
#      token and top-1 agreement ("same top") against llama.cpp's: must be <= the bound;
#   3. per mutation: the key set to the wrong value, step 2 again: must be > the bound.
# Random weights give nearly flat logits, so KL values are small and a bound that a
# mutation cannot exceed would prove nothing: the mutations are what the bounds are for.
# Usage: bench/crosscheck.sh [SHAPE ...]   (default: 1b)
#   SHAPE  1b (Llama-3.2-1B body, llama), gemma2-2b, phi3.5-mini, gpt-oss-20b (MXFP4_MOE:
#          experts MXFP4, the rest Q8_0), deepseek2-lite, qwen2.5-0.5b, qwen3-0.6b,
#          qwen3moe-30b-a3b-2l (Qwen3-30B-A3B's layer shape, 2 layers); tiny, gpt-oss-tiny,
#          deepseek2-tiny and qwen3moe-tiny check the script itself.
# Models: ${GPACK_CACHE:-~/.cache/gpack}/bench/crosscheck/synthetic-SHAPE.Q8_0.gguf, made
# once when missing (the f16 source is deleted after quantizing; free disk needed: the f16
# plus the Q8_0, e.g. 2.4 + 1.3 GB for 1b, 5.2 + 2.8 for gemma2-2b, 7.6 + 4.1 for
# phi3.5-mini, 12 + 12 for gpt-oss-20b, 31 + 16.5 for deepseek2-lite, 0.8 + 0.4 for
# qwen2.5-0.5b, 1.0 + 0.5 for qwen3-0.6b, 2.7 + 1.4 for qwen3moe-30b-a3b-2l).
# Exit 1 if a bound fails either way. Raw outputs: bench/logs/crosscheck-TIMESTAMP/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$(LLAMA_TARGETS="llama-quantize llama-perplexity" bash "$ROOT/scripts/build-llamacpp.sh")}
SHAPES=("$@"); [ ${#SHAPES[@]} -gt 0 ] || SHAPES=(1b)
TEXT=$ROOT/testdata/perplexity/corpus.txt
cd "$ROOT"
cargo build -q --locked -p gpack-cli >&2   # the dev profile (optimized)
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
G=${GPACK:-$TD/debug/gpack}
DIR=$CACHE/bench/crosscheck; mkdir -p "$DIR"
LOG=$ROOT/bench/logs/crosscheck-$(date -u +%Y%m%dT%H%M%SZ); mkdir -p "$LOG"
W=$(mktemp -d); RESTORE=()
restore() { for r in "${RESTORE[@]}"; do eval "$r" || true; done; rm -rf "$W"; }
trap restore EXIT
# Family of a shape, its bound on mean KL(llama.cpp || gpack) per token, and its family's
# mutations (KEY=VALUE, float32 keys of the GGUF; gpack reads the file with that value).
family() { case $1 in 1b | tiny | 8b) echo llama ;; gemma2-*) echo gemma2 ;; phi3*) echo phi3 ;;
  gpt-oss-*) echo gpt-oss ;; deepseek2-*) echo deepseek2 ;; qwen2.5-*) echo qwen2 ;;
  qwen3moe-*) echo qwen3moe ;; qwen3-*) echo qwen3 ;; esac; }
# Bounds per shape, each set between gpack's KL and its mutations' (bench/logs, 2026-12-07,
# docs/PERFORMANCE.md "Real-shape cross-check"); a shape without one prints its figures and
# exits 1: measure it, then set its bound here.
bound() {
  case $1 in
    1b) echo 0.002 ;;              # KL 5.0e-4; mutations 0.054, 0.178
    phi3.5-mini) echo 0.01 ;;      # KL 3.7e-3; rope halved 1.05, eps x10 0.456
    gemma2-2b) echo 0.0005 ;;      # KL 2.3e-4; final cap halved 7.8e-4, attn cap 5 2.5e-3, eps 1e-2 8.7e-3
    tiny) echo 0.00002 ;;          # KL 3.1e-6; rope halved 2.4e-5, eps x10 3.4e-4 (checks the script)
    gpt-oss-tiny) echo 0.0005 ;;   # KL 8.7e-5; mutations 1.0e-3, 1.5e-3
    deepseek2-tiny) echo 0.000015 ;; # KL 1.02e-5; mutations 1.96e-5, 2.07e-5 (flat: a thin margin)
    qwen2.5-0.5b) echo 0.0004 ;;   # KL 7.9e-5; rope halved 3.4e-3, eps 1e-4 4.0e-3 (2026-12-07)
    qwen3-0.6b) echo 0.0003 ;;     # KL 4.8e-5; rope halved 4.6e-3, eps 1e-4 1.7e-3
    qwen3moe-tiny) echo 0.00002 ;; # KL 1.9e-6; rope halved 1.3e-3, eps 1e-4 1.3e-4 (checks the script)
    *) echo none ;;
  esac
}
mutations() { # moderate errors: the RoPE base halved, the norm epsilon x10, a soft-cap halved
  case $1 in
    llama) echo "llama.rope.freq_base=250000 llama.attention.layer_norm_rms_epsilon=0.0001" ;;
    # gemma2 scales embeddings by sqrt(n_embd): activations of mean square ~1 hide an epsilon
    # x10, and random attention scores (~1) sit far below a cap of 25: those two are broken
    # harder (measured: cap 25 gave 2.7e-4, epsilon 1e-5 2.4e-4, both within the noise).
    gemma2) echo "gemma2.final_logit_softcapping=15 gemma2.attn_logit_softcapping=5 gemma2.attention.layer_norm_rms_epsilon=0.01" ;;
    phi3) echo "phi3.rope.freq_base=5000 phi3.attention.layer_norm_rms_epsilon=0.0001" ;;
    gpt-oss) echo "gpt-oss.rope.freq_base=75000 gpt-oss.attention.layer_norm_rms_epsilon=0.0001" ;;
    deepseek2) echo "deepseek2.rope.freq_base=5000 deepseek2.attention.layer_norm_rms_epsilon=0.00001" ;;
    # epsilon 1e-6 -> 1e-4: x10 hides under activations of mean square ~4e-4 (measured: KL
    # 1.8e-4 / 8.3e-5 / 1.9e-5 at qwen2.5-0.5b / qwen3-0.6b / qwen3moe-tiny, too near the noise).
    qwen2 | qwen3 | qwen3moe) echo "$1.rope.freq_base=500000 $1.attention.layer_norm_rms_epsilon=0.0001" ;;
  esac
}
# Sets a float32 metadata value in place; prints the old one.
setkv() {
  python3 - "$@" <<'PY'
import sys, gguf
path, key, value = sys.argv[1:]
r = gguf.GGUFReader(path, "r+")
f = r.fields.get(key)
if f is None or f.types != [gguf.GGUFValueType.FLOAT32]:
    sys.exit(f"{path}: no float32 key {key}")
old = float(f.parts[f.data[0]][0])
f.parts[f.data[0]][0] = float(value)
r.data.flush() if hasattr(r.data, "flush") else None
print(repr(old))
PY
}
model() {
  local shape=$1 q=Q8_0 m
  [ "$(family "$shape")" = gpt-oss ] && q=MXFP4
  m=$DIR/synthetic-$shape.$q.gguf
  if [ ! -f "$m" ]; then
    local src=$DIR/synthetic-$shape.f16.gguf
    python3 scripts/make-synthetic-llama.py "$shape" "$src" "$(bash scripts/fetch-models.sh)" >&2
    "$BIN/llama-quantize" "$src" "$m.tmp" "$([ $q = MXFP4 ] && echo MXFP4_MOE || echo Q8_0)" 2 >"$LOG/quantize-$shape.log" 2>&1
    mv "$m.tmp" "$m"; rm -f "$src"
  fi
  echo "$m"
}
kl() { # MODEL NAME: gpack's KL against $W/base.kld; prints "kld same_top"
  "$G" perplexity "$1" -t 2 --kl-divergence --kl-divergence-base "$W/base.kld" --json >"$LOG/$2.json"
  python3 -c 'import json, sys; k = json.load(open(sys.argv[1]))["kl"]; print(k["kld"], k["same_top"])' "$LOG/$2.json"
}
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), -c 256 --chunks 2 of $(basename "$TEXT")" | tee "$LOG/summary.md"
echo "| shape | family | run | mean KL | same top | bound | verdict |" | tee -a "$LOG/summary.md"
echo "|---|---|---|---|---|---|---|" | tee -a "$LOG/summary.md"
fail=0
for shape in "${SHAPES[@]}"; do
  fam=$(family "$shape"); [ -n "$fam" ] || { echo "unknown shape $shape" >&2; exit 2; }
  b=$(bound "$shape"); m=$(model "$shape")
  "$BIN/llama-perplexity" -m "$m" -f "$TEXT" -c 256 --chunks 2 -t 2 --kl-divergence-base "$W/base.kld" >"$LOG/llama-$shape.log" 2>&1
  read -r k top < <(kl "$m" "gpack-$shape")
  if [ "$b" = none ]; then
    v="no bound measured for this shape: set one in bound()"
  else
    v=$(python3 -c "print('ok' if $k <= $b else 'FAIL: above the bound')")
  fi
  [ "$v" = ok ] || fail=1
  echo "| $shape | $fam | gpack vs llama.cpp | $k | $top | $b | $v |" | tee -a "$LOG/summary.md"
  for mut in $(mutations "$fam"); do
    key=${mut%%=*}; val=${mut#*=}
    old=$(setkv "$m" "$key" "$val")
    RESTORE+=("setkv '$m' '$key' '$old' >/dev/null")
    read -r k top < <(kl "$m" "gpack-$shape-$key")
    setkv "$m" "$key" "$old" >/dev/null; unset 'RESTORE[-1]'
    v=$([ "$b" = none ] && echo "no bound" || python3 -c "print('ok: caught' if $k > $b else 'FAIL: mutation under the bound')")
    [ "${v%%:*}" = ok ] || fail=1
    echo "| $shape | $fam | $key $old -> $val | $k | $top | $b | $v |" | tee -a "$LOG/summary.md"
  done
done
exit $fail
