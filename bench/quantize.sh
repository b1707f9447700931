#!/usr/bin/env bash
# HF bf16 safetensors -> Q4_K_M: `gpack convert DIR --quant Q4_K_M` (one streaming step) against
# llama.cpp's two steps `convert_hf_to_gguf.py DIR --outtype bf16` + `llama-quantize BF16.gguf
# OUT.gguf Q4_K_M 2`, both on 2 threads, on synthetic models at real shapes (bench/make_hf_llama.py:
# SmolLM2-135M and a Llama-3.2-1B body). Time (wall, median of RUNS with min-max) and peak
# anonymous memory (RssAnon polled by bench/peak_rss.py) of each step; the gpack/two-step ratio.
# Goals (issue 45): time <= 0.5x the two-step pipeline's; RssAnon <= 1.1x the largest tensor
# (as bf16 in the source).
# Usage: bench/quantize.sh PYTHON [RUNS=3] [SHAPES="smollm2 1b"]
#   PYTHON: a Python with torch, transformers, numpy, safetensors, sentencepiece (convert_hf_to_gguf.py's
#   needs; see testdata/quantize/make_hf_references.sh for a throwaway venv), or "none": then
#   convert_hf_to_gguf.py is not run (its columns say "-") and llama-quantize reads a BF16 GGUF
#   made once, untimed, by `gpack convert --quant keep` + `gpack export` (the same tensors, in
#   llama.cpp's names and layout): gpack's one step is then compared with llama-quantize alone,
#   which can only flatter the peer. Warm page cache (each source is read once before timing).
#   Rounds alternate the tools. Run on an idle machine: the figures are wall times.
# Each shape's last round also checks that gpack's blocks are llama-quantize's: every tensor of
# gpack's output (through `gpack export`) has the sha256 of the same tensor in llama-quantize's
# ("blocks equal" column).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: bench/quantize.sh PYTHON [RUNS] [SHAPES]}
RUNS=${2:-3}
SHAPES=${3:-smollm2 1b}
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}/bench/quantize
mkdir -p "$CACHE"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p gpack-cli >&2
G=$CARGO_TARGET_DIR/release/gpack
BIN=$(bash scripts/build-llamacpp.sh)
LL=$(cd "$BIN/../.." && pwd)
# convert_hf_to_gguf.py refuses BPE pre-tokenizers it does not know by hash; the synthetic models
# carry the tiny fixtures' GPT-2-style tokenizer: answer "gpt-2" (the tensors are unaffected).
cat >"$CACHE/convert.py" <<'PYEOF'
import os, runpy, sys
ll = sys.argv[1]
sys.path[:0] = [ll, os.path.join(ll, "gguf-py")]
import conversion.base as base
orig = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre
sys.argv = [os.path.join(ll, "convert_hf_to_gguf.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
PYEOF
stat3() { sort -g | awk '{a[NR]=$1} END {printf "%s %s %s\n", a[int((NR+1)/2)], a[1], a[NR]}'; }
echo "# bench/quantize.sh $(date -u +%FT%TZ) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | bf16 GB | largest tensor MiB | gpack s (min-max) | convert_hf_to_gguf s | llama-quantize s | two-step s | gpack / two-step | RssAnon MiB gpack | convert_hf_to_gguf | llama-quantize | gpack RssAnon / largest tensor | blocks equal |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for shape in $SHAPES; do
  SRC=$CACHE/hf-$shape
  [ -f "$SRC/model.safetensors" ] || "$PY" bench/make_hf_llama.py "$shape" "$SRC" testdata/tiny/llama/hf >&2
  cat "$SRC/model.safetensors" >/dev/null
  largest=$(python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; h=json.loads(f.read(n)); print(max(v["data_offsets"][1]-v["data_offsets"][0] for k,v in h.items() if k!="__metadata__"))' "$SRC/model.safetensors")
  G_T=(); G_R=(); C_T=(); C_R=(); Q_T=(); Q_R=(); S_T=()
  if [ "$PY" = none ]; then
    "$G" convert "$SRC" -o "$CACHE/keep.gpack" --quant keep --force >/dev/null
    "$G" export "$CACHE/keep.gpack" -o "$CACHE/bf16.gguf" --force >/dev/null
    rm -f "$CACHE/keep.gpack"
    cat "$CACHE/bf16.gguf" >/dev/null
  fi
  for _ in $(seq "$RUNS"); do
    read -r t r < <(RAYON_NUM_THREADS=2 python3 bench/peak_rss.py "$G" convert "$SRC" -o "$CACHE/out.gpack" --quant Q4_K_M --force)
    G_T+=("$t"); G_R+=("$r")
    if [ "$PY" = none ]; then
      t1=0; C_T+=(0); C_R+=(0)
    else
      read -r t1 r < <(HF_HUB_OFFLINE=1 python3 bench/peak_rss.py "$PY" "$CACHE/convert.py" "$LL" "$SRC" --outtype bf16 --outfile "$CACHE/bf16.gguf")
      C_T+=("$t1"); C_R+=("$r")
    fi
    read -r t2 r < <(python3 bench/peak_rss.py "$BIN/llama-quantize" "$CACHE/bf16.gguf" "$CACHE/out.gguf" Q4_K_M 2)
    Q_T+=("$t2"); Q_R+=("$r")
    S_T+=("$(echo "$t1 + $t2" | bc -l)")
    [ "$PY" = none ] || rm -f "$CACHE/bf16.gguf"
  done
  rm -f "$CACHE/bf16.gguf"
  "$G" export "$CACHE/out.gpack" -o "$CACHE/out-gpack.gguf" --force >/dev/null
  same=$(python3 - "$CACHE/out-gpack.gguf" "$CACHE/out.gguf" "$LL/gguf-py" <<'PYEOF'
import hashlib, sys
sys.path.insert(0, sys.argv[3])
import gguf, numpy as np
def blocks(p):
    return {t.name: (t.tensor_type.name, hashlib.sha256(np.asarray(t.data).tobytes()).hexdigest())
            for t in gguf.GGUFReader(p).tensors}
a, b = blocks(sys.argv[1]), blocks(sys.argv[2])
bad = sorted(k for k in b if a.get(k) != b[k]) + sorted(set(a) - set(b))
print(f"all {len(b)}" if not bad else f"NO: {len(bad)} differ, e.g. {bad[0]}")
PYEOF
)
  rm -f "$CACHE/out-gpack.gguf"
  read -r g gmin gmax < <(printf '%s\n' "${G_T[@]}" | stat3)
  read -r c cmin cmax < <(printf '%s\n' "${C_T[@]}" | stat3)
  read -r q qmin qmax < <(printf '%s\n' "${Q_T[@]}" | stat3)
  read -r s smin smax < <(printf '%s\n' "${S_T[@]}" | stat3)
  gr=$(printf '%s\n' "${G_R[@]}" | sort -n | tail -1)
  cr=$(printf '%s\n' "${C_R[@]}" | sort -n | tail -1)
  qr=$(printf '%s\n' "${Q_R[@]}" | sort -n | tail -1)
  printf '| %s | %.2f | %.0f | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2f | %.0f | %.0f | %.0f | %.2f | %s |\n' \
    "$shape" "$(echo "$(stat -c %s "$SRC/model.safetensors") / 1000000000" | bc -l)" "$(echo "$largest / 1048576" | bc -l)" \
    "$g" "$gmin" "$gmax" "$c" "$cmin" "$cmax" "$q" "$qmin" "$qmax" "$s" "$smin" "$smax" \
    "$(echo "$g / $s" | bc -l)" "$(echo "$gr / 1024" | bc -l)" "$(echo "$cr / 1024" | bc -l)" \
    "$(echo "$qr / 1024" | bc -l)" "$(echo "$gr * 1024 / $largest" | bc -l)" "$same"
done
echo
echo "# done $(date -u +%FT%TZ), load after: $(cut -d' ' -f1-3 /proc/loadavg)"
