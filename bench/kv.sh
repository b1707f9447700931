#!/usr/bin/env bash
# Quantized KV caches (issue 44, "Measure"), gpack beside llama.cpp:
#  (a) KV bytes per position for each cache type (goal: q8_0 <= 0.55x f16);
#  (b) decode speed after DEPTH tokens of context, f16 vs q8_0 vs q4_0 caches, on a model
#      larger than the CPU's cache (goal: gpack's q8_0 >= 1.0x its f16);
#  (c) quality: mean KL-divergence and top-1 agreement of f16/q8_0/q4_0 caches against an
#      f32 cache over CHUNKS 512-token chunks of testdata/perplexity/corpus.txt.
# Usage: bench/kv.sh [ROUNDS=1] [REPS=3]   (PARTS="b" bench/kv.sh runs only (b); default "a b c")
# Env: GGUF     the bench model (default Qwen2.5-Coder-1.5B-Instruct Q4_K_M,
#               ${GPACK_CACHE:-~/.cache/gpack}/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)
#      GPACK_MODEL  its .gpack for (b) (default ~/.cache/gpack/bench/qwen15-q4km.gpack)
#      DEPTH=4096 NGEN=32 CHUNKS=4 TYPES="f16 q8_0 q4_0"
#      QUALITY_MODELS  the GGUFs of (a) and (c) (default: SmolLM2 and GGUF; on a loaded 2-vCPU
#               host llama-perplexity takes ~10 min a run of 4 chunks on the 1.5B)
#      GPACK    the gpack binary (default: this checkout's release build, built here)
#      LLAMA_BIN  llama.cpp's bin/ (default: scripts/build-llamacpp.sh's)
# (b): each round runs, per type, `gpack bench GPACK_MODEL -p 0 -n NGEN -d DEPTH -r REPS --kv T`
# (GPACK_THREADS=2) then `llama-bench -m GGUF -t 2 -p 0 -n NGEN -d DEPTH -r REPS -ctk T -ctv T
# -fa 1` (flash attention: llama.cpp's quantized V cache needs it; its f16 row uses it too).
# REPS inside one process, not REPS rounds: each process prefills DEPTH tokens first (gpack
# before every repetition, llama-bench once), minutes a process at 4k on 2 cores. Prints
# each process's samples, then per type and side the median (min-max) tok/s over all
# samples, gpack/llama.cpp, and each side's type/f16 ratio. (c): `gpack perplexity` and llama-perplexity (-fa on) on the
# same GGUF (SmolLM2-135M-Instruct Q4_1 from scripts/fetch-models.sh, and GGUF), each against
# its own f32-cache base logits; (a) reads gpack's bytes from `gpack bench --json`
# (kv_bytes_per_token) and llama.cpp's from llama-perplexity's "llama_kv_cache: size" line
# (-lv 4; its MiB figures have 2 decimals: ~0.05 % rounding).
# Logs and summary.md go to ${GPACK_CACHE:-~/.cache/gpack}/bench/logs/kv-TIMESTAMP/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
ROUNDS=${1:-1}
REPS=${2:-3}
PARTS=${PARTS:-"a b c"}
GGUF=${GGUF:-$CACHE/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
GPM=${GPACK_MODEL:-$CACHE/bench/qwen15-q4km.gpack}
DEPTH=${DEPTH:-4096}
NGEN=${NGEN:-32}
CHUNKS=${CHUNKS:-4}
TYPES=${TYPES:-"f16 q8_0 q4_0"}
TEXT=$ROOT/testdata/perplexity/corpus.txt
BIN=${LLAMA_BIN:-$(LLAMA_TARGETS="llama-bench llama-perplexity" bash "$ROOT/scripts/build-llamacpp.sh")}
cd "$ROOT"
if [ -z "${GPACK:-}" ]; then
  cargo build -q --release --locked -p gpack-cli >&2
  TD=$(cargo metadata -q --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  GPACK=$TD/release/gpack
fi
SMOL=$(bash scripts/fetch-models.sh)
for f in "$GGUF" "$GPM"; do [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }; done
LOG=$CACHE/bench/logs/kv-$(date -u +%Y%m%dT%H%M%SZ); mkdir -p "$LOG"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
{
  echo "# $(date -u +%FT%TZ) bench/kv.sh, code $(git rev-parse --short HEAD), $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) vCPU), load at start: $(load)"
  echo "# gpack $GPACK; llama.cpp $BIN"
} | tee "$LOG/summary.md"

if [[ " $PARTS " == *" b "* ]]; then
  : >"$W/b.txt"
  for r in $(seq "$ROUNDS"); do
    for t in $TYPES; do
      GPACK_THREADS=2 "$GPACK" bench "$GPM" -p 0 -n "$NGEN" -d "$DEPTH" -r "$REPS" --kv "$t" --json \
        >"$LOG/b-gpack-$t-$r.json" 2>"$LOG/b-gpack-$t-$r.err"
      g=$(python3 -c 'import json, sys; print(*json.load(open(sys.argv[1]))["tests"][0]["samples_ts"])' "$LOG/b-gpack-$t-$r.json")
      "$BIN/llama-bench" -m "$GGUF" -t 2 -p 0 -n "$NGEN" -d "$DEPTH" -r "$REPS" -ctk "$t" -ctv "$t" -fa 1 -o json \
        >"$LOG/b-llama-$t-$r.json" 2>"$LOG/b-llama-$t-$r.err"
      l=$(python3 -c 'import json, sys; print(*json.load(open(sys.argv[1]))[0]["samples_ts"])' "$LOG/b-llama-$t-$r.json")
      echo "round $r $t: gpack $g; llama.cpp $l tok/s (load $(load))" | tee -a "$LOG/summary.md"
      for x in $g; do echo "$t g $x" >>"$W/b.txt"; done
      for x in $l; do echo "$t l $x" >>"$W/b.txt"; done
    done
  done
  python3 - "$W/b.txt" "$TYPES" "$(basename "$GPM")" "$NGEN" "$DEPTH" <<'PY' | tee -a "$LOG/summary.md"
import statistics as s, sys
rows = [l.split() for l in open(sys.argv[1])]
types, name, n, d = sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5]
g = {t: [float(r[2]) for r in rows if r[:2] == [t, "g"]] for t in types}
l = {t: [float(r[2]) for r in rows if r[:2] == [t, "l"]] for t in types}
fmt = lambda v: f"{s.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"
print(f"\n(b) {name}, tg{n} @ d{d}, tok/s median (min–max) over {len(g[types[0]])} samples each")
print("| cache | gpack | llama.cpp | gpack / llama.cpp | gpack / its f16 | llama.cpp / its f16 |")
print("|---|---|---|---|---|---|")
for t in types:
    print(f"| {t} | {fmt(g[t])} | {fmt(l[t])} | {s.median(g[t]) / s.median(l[t]):.2f}x | "
          f"{s.median(g[t]) / s.median(g['f16']):.2f}x | {s.median(l[t]) / s.median(l['f16']):.2f}x |")
PY
fi

if [[ " $PARTS " == *" c "* || " $PARTS " == *" a "* ]]; then
  read -r -a QM <<<"${QUALITY_MODELS:-$SMOL $GGUF}"
  names=(); for m in "${QM[@]}"; do names+=("$(basename "$m" .gguf)"); done
  for m in "${QM[@]}"; do
    b=$(basename "$m" .gguf)
    "$GPACK" perplexity "$m" -f "$TEXT" --chunks "$CHUNKS" -t 2 --kv f32 \
      --kl-divergence-base "$W/g-$b.kld" --json >"$LOG/c-gpack-$b-f32.json"
    "$BIN/llama-perplexity" -m "$m" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t 2 -fa on -ctk f32 -ctv f32 -lv 4 \
      --kl-divergence-base "$W/l-$b.kld" >"$LOG/c-llama-$b-f32.log" 2>&1
    for t in $TYPES; do
      "$GPACK" perplexity "$m" -t 2 --kv "$t" --kl-divergence --kl-divergence-base "$W/g-$b.kld" \
        --json >"$LOG/c-gpack-$b-$t.json"
      "$BIN/llama-perplexity" -m "$m" -c 512 -t 2 -fa on -ctk "$t" -ctv "$t" -lv 4 --kl-divergence \
        --kl-divergence-base "$W/l-$b.kld" >"$LOG/c-llama-$b-$t.log" 2>&1
      GPACK_THREADS=2 "$GPACK" bench "$m" -p 0 -n 1 -r 1 --kv "$t" --json >"$LOG/a-gpack-$b-$t.json" 2>/dev/null
    done
    GPACK_THREADS=2 "$GPACK" bench "$m" -p 0 -n 1 -r 1 --kv f32 --json >"$LOG/a-gpack-$b-f32.json" 2>/dev/null
  done
  python3 - "$LOG" "$TYPES" "$CHUNKS" "${names[@]}" <<'PY' | tee -a "$LOG/summary.md"
import json, re, sys
log, types, chunks, models = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4:]
def llama_log(b, t):
    return open(f"{log}/c-llama-{b}-{t}.log", encoding="utf-8", errors="replace").read()
def llama_bpt(b, t):
    # "size = X MiB (CELLS cells, L layers, S/STREAMS seqs), K (t): X MiB, V (t): X MiB"
    m = re.search(r"llama_kv_cache: size = .*?\( *(\d+) cells.*?(\d+)/(\d+) seqs\), K \(\w+\): +([0-9.]+) MiB, V \(\w+\): +([0-9.]+) MiB", llama_log(b, t))
    return (float(m.group(4)) + float(m.group(5))) * 2**20 / (int(m.group(1)) * int(m.group(3)))
def gpack_bpt(b, t):
    return json.load(open(f"{log}/a-gpack-{b}-{t}.json"))["kv_bytes_per_token"]
print(f"\n(a) KV bytes per position (K + V, every layer)")
print("| model | cache | gpack B/pos | / f16 | llama.cpp B/pos | / f16 |")
print("|---|---|---|---|---|---|")
for b in models:
    for t in ["f32"] + types:
        g, gf = gpack_bpt(b, t), gpack_bpt(b, "f16")
        l, lf = llama_bpt(b, t), llama_bpt(b, "f16")
        print(f"| {b} | {t} | {g:.0f} | {g / gf:.3f} | {l:.0f} | {l / lf:.3f} |")
num = lambda s, k: float(re.search(re.escape(k) + r"\s*:\s*(-?[0-9.]+)", s).group(1))
print(f"\n(c) against each tool's own f32 cache, {chunks} x 512 tokens of corpus.txt (flash attention on for llama.cpp)")
print("| model | cache | gpack KLD | llama.cpp KLD | gpack same top | llama.cpp same top | gpack PPL | llama.cpp PPL |")
print("|---|---|---|---|---|---|---|---|")
for b in models:
    gb = json.load(open(f"{log}/c-gpack-{b}-f32.json"))
    lp = float(re.search(r"PPL = ([0-9.]+)", llama_log(b, "f32")).group(1))
    print(f"| {b} | f32 (base) | | | | | {gb['ppl']:.4f} | {lp:.4f} |")
    for t in types:
        k = json.load(open(f"{log}/c-gpack-{b}-{t}.json"))["kl"]
        s = llama_log(b, t)
        print(f"| {b} | {t} | {k['kld']:.6f} ± {k['kld_err']:.6f} | "
              f"{num(s, 'Mean    KLD'):.6f} | {100 * k['same_top']:.2f} % | "
              f"{num(s, 'Same top p'):.2f} % | {k['ppl']:.4f} | {num(s, 'Mean PPL(Q)'):.4f} |")
PY
fi
echo "load at end: $(load); logs in $LOG" | tee -a "$LOG/summary.md"
