#!/usr/bin/env bash
# Push and pull throughput of a >= 1 GB .gpack over loopback against a real
# registry (Debian's docker-registry, filesystem storage, htpasswd auth,
# plain HTTP on 127.0.0.1), vs `cp` + `sha256sum` of the same bytes (what
# moving and checking the file by hand costs), warm page cache, same run;
# then the bytes uploaded for a second quant variant of the same model (its
# shared sections mounted, not sent).
# Usage: bench/oci.sh [BIG.gpack] [VARIANT_A.gpack] [VARIANT_B.gpack] [RUNS]
# Defaults: the synthetic 1B llama bench files of scripts/make-bench-models.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${GPACK_CACHE:-$HOME/.cache/gpack}/bench
BIG=${1:-$B/synthetic-llama-1b.Q8_0.gpack}
VA=${2:-$B/synthetic-llama-1b.Q4_K_M.gpack}
VB=${3:-$B/synthetic-llama-1b.Q4_0.gpack}
RUNS=${4:-3}
for f in "$BIG" "$VA" "$VB"; do [ -f "$f" ] || { echo "missing $f (scripts/make-bench-models.sh)" >&2; exit 1; }; done
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked -p gpack-cli >&2
G=$PWD/target/release/gpack
REG=$(bash scripts/registry.sh)
W=$(mktemp -d "${TMPDIR:-/tmp}/gpack-oci-bench.XXXXXX")
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
htpasswd -Bbn bench bench-pw >"$W/htpasswd"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$W/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $W/storage
http:
  addr: 127.0.0.1:$PORT
auth:
  htpasswd:
    realm: bench
    path: $W/htpasswd
YML
"$REG" serve "$W/config.yml" >"$W/registry.log" 2>&1 &
PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done
H=127.0.0.1:$PORT
AUTH=(--insecure --username bench --password bench-pw)
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
SIZE=$(stat -c %s "$BIG")
cat "$BIG" >/dev/null
base() { cp "$BIG" "$W/copy" && sha256sum "$W/copy" >/dev/null && rm -f "$W/copy"; }
pushit() { GPACK_CACHE=$W/pc "$G" push "$BIG" "$H/bench/big:$1" "${AUTH[@]}"; }
pullit() { rm -rf "$W/store" "$W/out.gpack"; GPACK_CACHE=$W/store "$G" pull "$H/bench/big:v0" -o "$W/out.gpack" "${AUTH[@]}"; }
# Rounds alternate the three (cp + sha256sum, push, pull), so a slow minute
# of the disk or of writeback lands on all of them. Each push goes to an
# emptied registry storage, so every blob is sent again.
: >"$W/base.t"; : >"$W/push.t"; : >"$W/pull.t"
for i in $(seq "$RUNS"); do
  t base >>"$W/base.t"
  rm -rf "$W/storage" "$W/pc"
  t pushit v0 >>"$W/push.t"
  t pullit >>"$W/pull.t"
done
BASE=$(median <"$W/base.t"); PUSH=$(median <"$W/push.t"); PULL=$(median <"$W/pull.t")
cmp "$BIG" "$W/out.gpack"
GB=$(echo "$SIZE / 1000000000" | bc -l)
printf 'cpu: %s, %s cores; file: %s (%s bytes)\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$BIG" "$SIZE"
printf 'cp + sha256sum:  %.2f s  %.2f GB/s\n' "$BASE" "$(echo "$GB / $BASE" | bc -l)"
printf 'gpack push:      %.2f s  %.2f GB/s  %.2fx cp+sha256sum\n' "$PUSH" "$(echo "$GB / $PUSH" | bc -l)" "$(echo "$PUSH / $BASE" | bc -l)"
printf 'gpack pull:      %.2f s  %.2f GB/s  %.2fx cp+sha256sum (byte-identical)\n' "$PULL" "$(echo "$GB / $PULL" | bc -l)" "$(echo "$PULL / $BASE" | bc -l)"
# Second variant: A then B into two repositories of one registry.
rm -rf "$W/storage" "$W/pc"
GPACK_CACHE=$W/pc "$G" push "$VA" "$H/bench/a:v1" "${AUTH[@]}" --json >"$W/a.json"
GPACK_CACHE=$W/pc "$G" push "$VB" "$H/bench/b:v1" "${AUTH[@]}" --json >"$W/b.json"
python3 - "$W/a.json" "$W/b.json" "$VA" "$VB" <<'PY'
import json, os, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for name, r, f in (("first", a, sys.argv[3]), ("second", b, sys.argv[4])):
    st = {}
    for l in r["layers"]:
        st.setdefault(l["status"], []).append(l)
    size = os.path.getsize(f)
    print(f"{name} variant {os.path.basename(f)} ({size} bytes): uploaded {r['uploaded']} bytes "
          f"({100 * r['uploaded'] / size:.1f}%) in {r['uploaded_blobs']} blobs; "
          + ", ".join(f"{k} {sum(l['size'] for l in v)} bytes in {len(v)}" for k, v in sorted(st.items())))
mounted = [l["section"] for l in b["layers"] if l["status"] == "mounted"]
print("shared sections mounted, not sent:", ", ".join(mounted))
PY
