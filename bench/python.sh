#!/usr/bin/env bash
# The Python package against safetensors and llama-cpp-python, one run
# (issue 19's Measure; docs/PERFORMANCE.md "Python package"):
# bench/python_open.py on SmolLM2-135M (its .gpack, the same weights exported
# as float32 safetensors, its GGUF for llama-cpp-python).
# Usage: bench/python.sh [MODEL.gguf] [REPS=15]
# LLAMA_CPP_PYTHON=1 also tries `pip install llama-cpp-python` (a source
# build of llama.cpp, limited to LLAMA_CPP_TIMEOUT seconds, default 1800);
# without it, or when the build fails, the first-token comparison is n/a.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
MODEL=${1:-$(bash scripts/fetch-models.sh)}
REPS=${2:-15}
VENV=${GPACK_BENCH_VENV:-$CACHE/py-bench-venv}
W=$CACHE/bench/python
mkdir -p "$W"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
"${PIP[@]}" install -r crates/python/tests/requirements.txt safetensors==0.8.0
if [ "${LLAMA_CPP_PYTHON:-0}" = 1 ] && ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  CMAKE_ARGS="-DGGML_NATIVE=ON" timeout "${LLAMA_CPP_TIMEOUT:-1800}" \
    "${PIP[@]}" install llama-cpp-python ||
    echo "llama-cpp-python did not install (build failed or timed out)" >&2
fi
PATH="$VENV/bin:$PATH" MATURIN_PEP517_ARGS="--locked" \
  "${PIP[@]}" install --no-build-isolation --force-reinstall --no-deps ./crates/python
GP=$W/smollm2.gpack
"$VENV/bin/python" -c 'import gpack, sys; gpack.convert(sys.argv[1], sys.argv[2], force=True)' "$MODEL" "$GP"
echo "# $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
GPACK_THREADS=${GPACK_THREADS:-2} "$VENV/bin/python" bench/python_open.py "$MODEL" "$GP" "$W" --reps "$REPS"
