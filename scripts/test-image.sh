#!/usr/bin/env bash
# Builds the gpack image (deploy/Dockerfile: FROM scratch + one static
# binary), pushes it to a loopback registry (Debian's docker-registry, as
# the OCI tests use: scripts/registry.sh), removes the local copy, pulls it
# back and runs `gpack --version` from it; the output must equal the
# binary's own. NOT part of CI (scripts/test.sh): the static release build
# alone takes many minutes on a 2-core runner.
#
# Needs podman (Debian's, installed with apt-get when missing and root).
# Containers are run with `podman run`; where the sandbox refuses it (this
# project's build machine: crun/runc may not set RLIMIT_NPROC inside the
# container, "setrlimit RLIMIT_NPROC: Operation not permitted"), the pulled
# image's root file system and config are run by runc directly as an OCI
# bundle without rlimits, and the script says so.
#
# Usage: scripts/test-image.sh   (CARGO_TARGET_DIR is honoured)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TRIPLE=x86_64-unknown-linux-gnu

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "test-image.sh: ${need[*]} missing and not root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

echo "== static release build" >&2
(cd "$ROOT" && RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --release --locked --target "$TRIPLE" -p gpack-cli --bin gpack >&2)
BIN=$TARGET_DIR/$TRIPLE/release/gpack
if ! file -L "$BIN" | grep -Eq 'statically linked|static-pie linked'; then
  echo "test-image.sh: $BIN is not statically linked: $(file -L "$BIN")" >&2
  exit 1
fi
WANT=$("$BIN" --version)
TAG=$(echo "$WANT" | awk '{print $2}')-test

WORK=$(mktemp -d)
REG_PID=
cleanup() {
  [ -n "$REG_PID" ] && kill "$REG_PID" 2>/dev/null || true
  podman image umount "127.0.0.1:${PORT:-0}/gpack:$TAG" >/dev/null 2>&1 || true
  podman rmi -f "localhost/gpack-test:$TAG" "127.0.0.1:${PORT:-0}/gpack:$TAG" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== podman build (deploy/Dockerfile)" >&2
mkdir -p "$WORK/ctx"
cp "$BIN" "$WORK/ctx/gpack"
podman build -q -f "$ROOT/deploy/Dockerfile" --build-arg GPACK_BIN=gpack \
  -t "localhost/gpack-test:$TAG" "$WORK/ctx" >&2

echo "== loopback registry" >&2
REG=$("$ROOT/scripts/registry.sh")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $WORK/storage}}
http: {addr: 127.0.0.1:$PORT}
EOF
"$REG" serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && break
  sleep 0.1
done
IMAGE=127.0.0.1:$PORT/gpack:$TAG
podman push -q --tls-verify=false "localhost/gpack-test:$TAG" "docker://$IMAGE" >&2
podman rmi -f "localhost/gpack-test:$TAG" >/dev/null
echo "== pull $IMAGE back" >&2
podman pull -q --tls-verify=false "$IMAGE" >&2
SIZE=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "image size: $SIZE bytes" >&2

echo "== run gpack --version from the image" >&2
if GOT=$(podman run --rm "$IMAGE" --version 2>"$WORK/run.err"); then
  HOW="podman run"
else
  echo "podman run failed here: $(tail -1 "$WORK/run.err")" >&2
  echo "running the pulled image with runc as an OCI bundle (no rlimits)" >&2
  MNT=$(podman image mount "$IMAGE")
  mkdir -p "$WORK/bundle/rootfs"
  cp -a "$MNT/." "$WORK/bundle/rootfs/"
  podman image umount "$IMAGE" >/dev/null
  podman image inspect --format '{{json .Config}}' "$IMAGE" >"$WORK/image-config.json"
  (cd "$WORK/bundle" && runc spec)
  python3 - "$WORK/bundle/config.json" "$WORK/image-config.json" <<'PY'
import json, sys
spec_path, image_path = sys.argv[1:]
spec = json.load(open(spec_path))
image = json.load(open(image_path))
p = spec["process"]
p.pop("rlimits", None)
p["terminal"] = False
p["args"] = (image.get("Entrypoint") or []) + ["--version"]
p["env"] = image.get("Env") or p["env"]
user = image.get("User") or "0:0"
uid, _, gid = user.partition(":")
p["user"] = {"uid": int(uid), "gid": int(gid or uid)}
spec["root"] = {"path": "rootfs", "readonly": True}
json.dump(spec, open(spec_path, "w"))
PY
  GOT=$(cd "$WORK/bundle" && runc run "gpack-test-$$")
  HOW="runc (OCI bundle of the pulled image)"
fi
echo "$HOW: $GOT" >&2
if [ "$GOT" != "$WANT" ]; then
  echo "test-image.sh: the image says '$GOT', the binary '$WANT'" >&2
  exit 1
fi
echo "ok: $IMAGE runs: $GOT ($HOW)"
