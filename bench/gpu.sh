#!/usr/bin/env bash
# gpack on a GPU against llama.cpp's Vulkan backend on the same device (issue 43, "Measure"),
# both sides in one run, alternating: prefill (pp512), decode (tg128), process start to first
# token, and gpack's upload rate (section bytes read from the mapping, SHA-256 checked, on the
# device, per second).
# Usage: bench/gpu.sh [MODEL.gguf …] [REPS]
#   MODELs  default: SmolLM2-135M Q4_1 (scripts/fetch-models.sh) and, when present,
#           ${GPACK_CACHE:-~/.cache/gpack}/bench/synthetic-llama-1b.{Q4_K_M,Q8_0}.gguf and
#           synthetic-llama-8b.Q4_K_M.gguf (scripts/make-bench-models.sh makes them)
#   REPS    rounds per model (default 3): medians with min–max.
# Runs as-is on any Linux machine with a Vulkan driver: a real GPU, or Mesa's lavapipe (a
# conformant Vulkan device on the CPU: then the figures say nothing about a GPU, and the
# script says so). The peer is llama.cpp built with GGML_VULKAN=ON from the registry source
# (scripts/build-llamacpp-vulkan.sh, run when missing; not part of CI), `llama-bench -ngl 99`.
# gpack: `gpack bench --device gpu` (a hardware adapter if there is one, else the software
# one with a warning). Raw outputs go to ${GPACK_CACHE}/bench/logs/gpu-TIMESTAMP/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
REPS=3
MODELS=()
for a in "$@"; do
  if [[ $a =~ ^[0-9]+$ ]]; then REPS=$a; else MODELS+=("$a"); fi
done
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS+=("$(bash "$ROOT/scripts/fetch-models.sh")")
  for f in "$CACHE"/bench/synthetic-llama-1b.Q4_K_M.gguf "$CACHE"/bench/synthetic-llama-1b.Q8_0.gguf \
           "$CACHE"/bench/synthetic-llama-8b.Q4_K_M.gguf; do
    [ -f "$f" ] && MODELS+=("$f")
  done
fi
# The peer: when it cannot be built here (the script says why: e.g. Debian 12's Vulkan
# headers are older than llama.cpp's Vulkan backend needs), gpack's side still runs and the
# tables say "peer unavailable".
PEER_WHY=""
if [ -n "${LLAMA_VULKAN_BIN:-}" ]; then
  BIN=$LLAMA_VULKAN_BIN
elif ! BIN=$(bash "$ROOT/scripts/build-llamacpp-vulkan.sh" 2>/tmp/gpu-peer-build.$$); then
  PEER_WHY=$(tail -1 /tmp/gpu-peer-build.$$)
fi
rm -f /tmp/gpu-peer-build.$$
if [ -z "$PEER_WHY" ] && [ ! -x "$BIN/llama-bench" ]; then PEER_WHY="llama-bench (Vulkan) not found in $BIN"; fi
[ -z "$PEER_WHY" ] || echo "peer unavailable: $PEER_WHY" >&2
cd "$ROOT"
cargo build -q --release --locked -p gpack-cli >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
G=$TD/release/gpack
LOGS=$CACHE/bench/logs/gpu-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$LOGS"
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 </dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
echo "# bench/gpu.sh $(date -u +%FT%TZ), $(git -C "$ROOT" rev-parse --short HEAD), CPU: $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for M in "${MODELS[@]}"; do
  name=$(basename "$M" .gguf)
  GP=$CACHE/bench/$name.gpack
  if [ ! -f "$GP" ] || [ "$GP" -ot "$M" ] || [ "$GP" -ot "$G" ]; then
    "$G" convert "$M" -o "$GP" --force >/dev/null
  fi
  cat "$M" "$GP" >/dev/null
  for r in $(seq "$REPS"); do
    "$G" bench "$GP" --device gpu -p 512 -n 128 -r 1 --json >"$LOGS/$name.gpack.$r.json" 2>"$LOGS/$name.gpack.$r.err"
    if [ -z "$PEER_WHY" ]; then
      "$BIN/llama-bench" -m "$M" -ngl 99 -p 512 -n 128 -r 1 -o json >"$LOGS/$name.llama.$r.json" 2>"$LOGS/$name.llama.$r.err"
    fi
    "$G" run "$GP" --device gpu --verbose -p "Hello" -n 1 --ctx 2048 >/dev/null 2>"$LOGS/$name.run.$r.err"
    peer_ms=0
    [ -n "$PEER_WHY" ] || peer_ms=$(ms "$BIN/llama-completion" -m "$M" -ngl 99 -p Hello -n 1 -no-cnv --temp 0 -c 2048)
    echo "$(ms "$G" run "$GP" --device gpu -p Hello -n 1 --ctx 2048) $peer_ms" >"$LOGS/$name.ttft.$r"
  done
  python3 - "$LOGS" "$name" "$REPS" <<'PY'
import json, re, statistics, sys
logs, name, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def med(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" if v else "peer unavailable"
g = {"pp": [], "tg": []}; l = {"pp": [], "tg": []}; up = []; tt = ([], []); dev = ""
for r in range(1, reps + 1):
    for t in json.load(open(f"{logs}/{name}.gpack.{r}.json"))["tests"]:
        g["pp" if t["n_prompt"] else "tg"].append(t["median_ts"])
    try:
        for t in json.load(open(f"{logs}/{name}.llama.{r}.json")):
            l["pp" if t["n_prompt"] else "tg"].append(t["avg_ts"])
    except FileNotFoundError:
        pass
    err = open(f"{logs}/{name}.run.{r}.err").read()
    m = re.search(r"device: (.*)", err)
    dev = m.group(1) if m else "cpu (no GPU line)"
    rates = [float(x) for x in re.findall(r"\(([0-9.]+) MB/s", err)]
    byts = [float(x) for x in re.findall(r": ([0-9.]+) MiB in [0-9.]+ s", err)]
    secs = [float(x) for x in re.findall(r"MiB in ([0-9.]+) s", err)]
    if secs and sum(secs) > 0:
        up.append(sum(byts) * 1.048576 / sum(secs) / 1000)
    a, b = open(f"{logs}/{name}.ttft.{r}").read().split()
    tt[0].append(float(a))
    if float(b) > 0:
        tt[1].append(float(b))
print(f"\n## {name}\ndevice: {dev[:160]}")
if "software" in dev:
    print("(a software adapter: these figures say nothing about a GPU)")
print("| test | gpack | llama.cpp-Vulkan | ratio |\n|---|---:|---:|---:|")
for k, label in (("pp", "pp512 t/s"), ("tg", "tg128 t/s")):
    ratio = statistics.median(g[k]) / statistics.median(l[k]) if g[k] and l[k] else float("nan")
    print(f"| {label} | {med(g[k])} | {med(l[k])} | {ratio:.2f}× |")
ratio = statistics.median(tt[0]) / statistics.median(tt[1]) if tt[1] else float("nan")
print(f"| start to first token ms | {med(tt[0])} | {med(tt[1])} | {ratio:.2f}× |")
print(f"| upload GB/s (read + SHA-256 + device) | {med(up)} | – | |")
PY
done
echo "raw outputs: $LOGS"
