#!/usr/bin/env bash
# Real-shape correctness cross-check against llama.cpp where no transformers reference exists
# (the synthetic benchmark models): the same token ids through llama.cpp (testdata/scripts/
# llama_ref.cpp, built by testdata/scripts/27_llamacpp_q8_0_multi_prompt.sh's recipe) on
# MODEL.gguf and through gpack (crates/runtime/examples/logits.rs) on its .gpack; prints the
# per-position argmax agreement, the last logits' relative L2 distance and the greedy prefix
# both take. Both quantize activations (differently), so small distances are expected; a
# wrong graph shows as distances of order 1.
# Usage: bench/crosscheck.sh MODEL.gguf [N_PROMPT=32] [N_NEW=16] [SEED=1]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
M=${1:?usage: bench/crosscheck.sh MODEL.gguf [N_PROMPT] [N_NEW] [SEED]}
NP=${2:-32}; NN=${3:-16}; SEED=${4:-1}
GP=${M%.gguf}.gpack
[ -f "$GP" ] || { echo "no $GP (gpack convert $M -o $GP)" >&2; exit 1; }
REF=$CACHE/llama_ref/llama_ref
[ -x "$REF" ] || { echo "no $REF (bash testdata/scripts/27_llamacpp_q8_0_multi_prompt.sh builds it)" >&2; exit 1; }
cd "$ROOT"
cargo build -q --release --locked -p gpack-runtime --example logits >&2
TD=$(cargo metadata -q --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
NV=$(python3 - "$M" <<'PY'
import sys, struct
# n_vocab: the token list's length from the GGUF header (no gguf package needed).
f = open(sys.argv[1], "rb"); f.read(8); nt, nkv = struct.unpack("<QQ", f.read(16))
def s(): n, = struct.unpack("<Q", f.read(8)); return f.read(n)
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t):
    if t == 8: s()
    elif t == 9:
        et, n = struct.unpack("<IQ", f.read(12))
        if et == 8:
            for _ in range(n): s()
        else: f.read(size[et] * n)
        return n
    else: f.read(size[t])
for _ in range(nkv):
    k = s().decode(); t, = struct.unpack("<I", f.read(4)); n = skip(t)
    if k == "tokenizer.ggml.tokens": print(n); break
PY
)
IDS=$(python3 -c "import random; r = random.Random($SEED); print(','.join(str(r.randrange(3, $NV)) for _ in range($NP)))")
echo "# $(date -u +%FT%TZ) $(basename "$M"): $NP random ids (seed $SEED, vocabulary $NV), $NN greedy steps"
L=$(mktemp); G=$(mktemp); trap 'rm -f "$L" "$G"' EXIT
"$REF" "$M" "$IDS" "$NN" >"$L"
GPACK_THREADS=${GPACK_THREADS:-2} "$TD/release/examples/logits" "$GP" "$IDS" "$NN" >"$G"
python3 - "$L" "$G" <<'PY'
import json, math, sys
l, g = (json.load(open(p)) for p in sys.argv[1:3])
am = sum(a == b for a, b in zip(l["argmax"], g["argmax"]))
a, b = l["last_logits"], g["last_logits"]
d = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(x * x for x in a))
pre = 0
for x, y in zip(l["greedy"], g["greedy"]):
    if x != y: break
    pre += 1
print(f"argmax per position: {am}/{len(l['argmax'])} equal")
print(f"last logits: rel L2 {d:.2e} (gpack vs llama.cpp)")
print(f"greedy: {pre}/{len(l['greedy'])} equal from the start; llama.cpp {l['greedy']}, gpack {g['greedy']}")
PY
