#!/usr/bin/env bash
# Two builds of gpack side by side on the same models (a refactor's "speed unchanged"):
# rounds alternate OLD, NEW, OLD, NEW…, each `gpack bench MODEL -p P -n N -r 1 --json`
# with GPACK_THREADS=2; prints every round, the medians with min–max and NEW/OLD.
# Usage: bench/versions.sh OLD_GPACK NEW_GPACK MODEL.gpack [MODEL.gpack …]
#   ROUNDS (default 5), P (prompt tokens, default 128), N (generated tokens, default 32),
#   NEW_ARGS (extra flags for NEW only, e.g. "--kv f32" when OLD predates the f16 default).
# Both binaries must read the .gpack (convert it with either). Run on a quiet machine: the
# script prints the load average before it starts.
set -euo pipefail
OLD=${1:?usage: bench/versions.sh OLD_GPACK NEW_GPACK MODEL.gpack…}
NEW=${2:?usage: bench/versions.sh OLD_GPACK NEW_GPACK MODEL.gpack…}
shift 2
[ $# -gt 0 ] || { echo "no model given" >&2; exit 1; }
ROUNDS=${ROUNDS:-5}
P=${P:-128}
N=${N:-32}
read -r -a EXTRA <<<"${NEW_ARGS:-}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for M in "$@"; do
  LOG=$(mktemp)
  for r in $(seq "$ROUNDS"); do
    for side in old new; do
      if [ $side = old ]; then BIN=$OLD ARGS=(); else BIN=$NEW ARGS=("${EXTRA[@]}"); fi
      GPACK_THREADS=2 "$BIN" bench "$M" -p "$P" -n "$N" -r 1 --json "${ARGS[@]}" |
        python3 -c 'import json, sys
d = json.load(sys.stdin)
t = {x["test"].split(" ")[0][:2]: x["median_ts"] for x in d["tests"]}
print(sys.argv[1], sys.argv[2], t.get("pp", 0), t.get("tg", 0))' "$side" "$r" >>"$LOG"
    done
  done
  python3 - "$M" "$LOG" "$P" "$N" <<'PY'
import statistics, sys
m, log, p, n = sys.argv[1:]
rows = [l.split() for l in open(log)]
for r in rows:
    print(f"  round {r[1]} {r[0]}: pp{p} {float(r[2]):.1f}  tg{n} {float(r[3]):.1f}")
def col(side, i):
    return [float(r[i]) for r in rows if r[0] == side]
print(f"{m}:")
for i, name in ((2, f"pp{p}"), (3, f"tg{n}")):
    o, w = col("old", i), col("new", i)
    if not any(o):
        continue
    mo, mw = statistics.median(o), statistics.median(w)
    print(f"  {name}: old {mo:.1f} ({min(o):.1f}-{max(o):.1f})  new {mw:.1f} ({min(w):.1f}-{max(w):.1f})  new/old {mw / mo:.3f}")
PY
  rm -f "$LOG"
done
