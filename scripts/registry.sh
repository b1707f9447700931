#!/usr/bin/env bash
# Make sure the registry the OCI tests start is installed: Debian's
# `docker-registry` (CNCF distribution) and `htpasswd` (apache2-utils, for
# the bcrypt password file). Installs them with apt-get only when missing
# (needs root, as in CI); idempotent. Prints the registry binary's path.
# Usage: scripts/registry.sh
set -euo pipefail
need=()
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/registry.sh: ${need[*]} missing and not root (apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi
command -v docker-registry
