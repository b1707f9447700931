#!/usr/bin/env bash
# The ranged ModelPack pull of one .gpack by two gpack binaries, alternating
# rounds, page cache dropped before each pull when permitted (else warm):
# the A/B of a change to the pull (e.g. its verifier). Prints medians with
# min-max and the ratio B/A.
# Usage: bench/pull_ab.sh GPACK_A GPACK_B [MODEL.gpack] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2
MODEL=${3:-${GPACK_CACHE:-$HOME/.cache/gpack}/bench/qwen15-q4km.gpack}
RUNS=${4:-3}
REG=$(bash scripts/registry.sh)
W=$(mktemp -d "${TMPDIR:-/tmp}/gpack-pull-ab.XXXXXX")
RPID=
trap '[ -n "$RPID" ] && kill "$RPID" 2>/dev/null; rm -rf "$W"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\n' "$W/storage" "$PORT" >"$W/config.yml"
"$REG" serve "$W/config.yml" >"$W/registry.log" 2>&1 &
RPID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done
"$A" push "$MODEL" "127.0.0.1:$PORT/ab/m:v1" --insecure >/dev/null
if sync && (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then CACHE=cold; prep() { sync; echo 3 >/proc/sys/vm/drop_caches; }
else CACHE=warm; prep() { cat "$MODEL" >/dev/null; }; fi
: >"$W/a.t"; : >"$W/b.t"
for i in $(seq "$RUNS"); do
  for side in a b; do
    bin=$A; [ "$side" = b ] && bin=$B
    rm -rf "$W/out.gpack" "$W/store"; prep
    s=$(date +%s.%N)
    GPACK_CACHE=$W/store "$bin" pull "127.0.0.1:$PORT/ab/m:v1" -o "$W/out.gpack" --insecure >/dev/null
    e=$(date +%s.%N); echo "$e - $s" | bc -l >>"$W/$side.t"
    cmp "$W/out.gpack" "$MODEL"
  done
done
mr() { sort -n | awk '{a[NR]=$1} END {printf "%.2f s (%.2f-%.2f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
md() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'load average: %s; page cache: %s; %s rounds; %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" "$CACHE" "$RUNS" "$MODEL"
printf 'A %s: %s\nB %s: %s\nB/A: %.2f\n' "$A" "$(mr <"$W/a.t")" "$B" "$(mr <"$W/b.t")" "$(echo "$(md <"$W/b.t") / $(md <"$W/a.t")" | bc -l)"
