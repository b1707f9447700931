#!/usr/bin/env bash
# A Vulkan driver for the GPU tests (crates/gpu): Mesa's lavapipe, a conformant
# Vulkan 1.3 device that runs on the CPU (it proves kernels correct, not fast).
# Installs Debian's mesa-vulkan-drivers and libvulkan1 with apt-get when no
# lavapipe ICD is present. Idempotent; prints the ICD file.
set -euo pipefail
icd() { ls /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1; }
if [ -z "$(icd)" ] || ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/vulkan.sh: no Vulkan driver and not root (apt-get install -y mesa-vulkan-drivers libvulkan1)" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1 >&2; }
fi
icd
