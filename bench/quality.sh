#!/usr/bin/env bash
# Quality of the quant types (issue 45, "Measure"): PPL and KL-divergence of Q8_0, Q6_K,
# Q5_K_M, Q4_K_M and IQ4_XS of one real model, quantized from one F16 source by
# `gpack convert --quant` and by llama-quantize, measured by `gpack perplexity` and by
# llama-perplexity against their own F16 base logits, side by side.
# Usage: bench/quality.sh [F16.gguf] [CHUNKS=14]
#   F16.gguf  default: SmolLM2-135M-Instruct made F16 by `llama-quantize --allow-requantize
#             Q4_1.gguf F16` from scripts/fetch-models.sh's Q4_1 (the registry carries no
#             F16/BF16 SmolLM2: the source's weights are Q4_1's values, exactly, in F16)
#   CHUNKS    chunks of 512 tokens of testdata/perplexity/corpus.txt (GPL-3: 14 chunks)
# Both tools: 2 threads, -c 512, f16 KV cache. Work files go to a temp dir under
# ${GPACK_CACHE:-~/.cache/gpack}/quality (removed at the end: ~2 × 25 MB per chunk of
# base logits plus the quants); logs to bench/logs/quality-TIMESTAMP/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$(LLAMA_TARGETS="llama-quantize llama-perplexity" bash "$ROOT/scripts/build-llamacpp.sh")}
SRC=${1:-}
CHUNKS=${2:-14}
TYPES=${TYPES:-"Q8_0 Q6_K Q5_K_M Q4_K_M IQ4_XS"}
TEXT=$ROOT/testdata/perplexity/corpus.txt
cd "$ROOT"
cargo build -q --locked -p gpack-cli >&2   # the dev profile (optimized; the figures do not depend on speed)
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
G=${GPACK:-$TD/debug/gpack}
mkdir -p "$CACHE/quality"
W=$(mktemp -d "$CACHE/quality/run.XXXXXX"); trap 'rm -rf "$W"' EXIT
LOG=$ROOT/bench/logs/quality-$(date -u +%Y%m%dT%H%M%SZ); mkdir -p "$LOG"
if [ -z "$SRC" ]; then
  SRC=$CACHE/quality/SmolLM2-135M-Instruct.F16.gguf
  [ -f "$SRC" ] || {
    "$BIN/llama-quantize" --allow-requantize "$(bash scripts/fetch-models.sh)" "$SRC.tmp" F16 >"$LOG/f16.log" 2>&1
    mv "$SRC.tmp" "$SRC"
  }
fi
echo "# $(date -u +%FT%TZ) $(basename "$SRC"), $CHUNKS x 512 tokens of $(basename "$TEXT"), $(lscpu | sed -n 's/^Model name: *//p')" | tee "$LOG/summary.md"
"$G" perplexity "$SRC" -f "$TEXT" --chunks "$CHUNKS" -t 2 --kl-divergence-base "$W/g.kld" --json >"$LOG/gpack-F16.json"
"$BIN/llama-perplexity" -m "$SRC" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t 2 --kl-divergence-base "$W/l.kld" >"$LOG/llama-F16.log" 2>&1
for T in $TYPES; do
  "$G" convert "$SRC" --quant "$T" -o "$W/$T.gpack" --force >"$LOG/convert-$T.log" 2>&1
  "$BIN/llama-quantize" "$SRC" "$W/$T.gguf" "$T" 2 >"$LOG/quantize-$T.log" 2>&1
  "$G" perplexity "$W/$T.gpack" -t 2 --kl-divergence --kl-divergence-base "$W/g.kld" --json >"$LOG/gpack-$T.json"
  "$BIN/llama-perplexity" -m "$W/$T.gguf" -c 512 -t 2 --kl-divergence --kl-divergence-base "$W/l.kld" >"$LOG/llama-$T.log" 2>&1
  # Cross: gpack on llama-quantize's file against llama's base, the other pairing.
  "$G" perplexity "$W/$T.gguf" -t 2 --kl-divergence --kl-divergence-base "$W/l.kld" --json >"$LOG/gpack-on-llama-$T.json"
  rm -f "$W/$T.gpack" "$W/$T.gguf"
done
python3 - "$LOG" "$TYPES" <<'PY' | tee -a "$LOG/summary.md"
import json, re, sys
log, types = sys.argv[1], sys.argv[2].split()
def llama(t):
    s = open(f"{log}/llama-{t}.log", encoding="utf-8", errors="replace").read()
    num = lambda k: float(re.search(re.escape(k) + r"\s*:\s*(-?[0-9.]+)", s).group(1))
    return num("Mean PPL(Q)"), num("Mean PPL(base)"), num("Mean    KLD"), num("Same top p")
def gp(name):
    j = json.load(open(f"{log}/{name}.json"))
    k = j["kl"]
    return k["ppl"], k["ppl_base"], k["kld"], 100 * k["same_top"]
print("| type | gpack PPL | llama.cpp PPL | gpack KLD | llama.cpp KLD | gpack same top | llama.cpp same top | gpack on llama-quantize's file vs llama's base: KLD |")
print("|---|---|---|---|---|---|---|---|")
g16 = json.load(open(f"{log}/gpack-F16.json"))
l16 = float(re.search(r"PPL = ([0-9.]+)", open(f"{log}/llama-F16.log", errors="replace").read()).group(1))
print(f"| F16 (base) | {g16['ppl']:.4f} | {l16:.4f} | | | | | |")
for t in types:
    a, b = gp(f"gpack-{t}"), llama(t)
    c = gp(f"gpack-on-llama-{t}")
    print(f"| {t} | {a[0]:.4f} | {b[0]:.4f} | {a[2]:.6f} | {b[2]:.6f} | {a[3]:.2f} % | {b[3]:.2f} % | {c[2]:.6f} |")
PY
