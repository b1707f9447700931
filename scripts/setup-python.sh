#!/usr/bin/env bash
# Create (if missing) the Python venv the server tests use, with the `openai`
# client, `jsonschema` (structured outputs), `selenium` (the chat page's
# browser test) and `oras` (an independent OCI client for the ModelPack
# tests) pinned, and print its python path on stdout (progress on
# stderr).
# Usage: scripts/setup-python.sh   (venv: ${GPACK_CACHE:-$HOME/.cache/gpack}/venv)
# Idempotent and quick once made; needs python3 with venv, and network access
# to the Python package registry on the first run.
set -euo pipefail
OPENAI_VERSION=3.51.0
JSONSCHEMA_VERSION=4.26.0
SELENIUM_VERSION=4.35.0
ORAS_VERSION=0.2.43
VENV=${GPACK_CACHE:-$HOME/.cache/gpack}/venv
PY=$VENV/bin/python
mkdir -p "$(dirname "$VENV")"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV" >&2 || {
    # Debian's python3 without ensurepip: make the venv without pip, then bootstrap it.
    python3 -m venv --without-pip "$VENV" >&2
    python3 -m pip --python "$PY" --version >/dev/null 2>&1 || true
  }
fi
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("openai"), m.version("jsonschema"), m.version("selenium"), m.version("oras"))' 2>/dev/null || true)
if [ "$have" != "$OPENAI_VERSION $JSONSCHEMA_VERSION $SELENIUM_VERSION $ORAS_VERSION" ]; then
  # A lock so that concurrent test processes do not install at once.
  exec 9>"$VENV.lock"
  flock 9
  have=$("$PY" -c 'import importlib.metadata as m; print(m.version("openai"), m.version("jsonschema"), m.version("selenium"), m.version("oras"))' 2>/dev/null || true)
  if [ "$have" != "$OPENAI_VERSION $JSONSCHEMA_VERSION $SELENIUM_VERSION $ORAS_VERSION" ]; then
    if "$PY" -m pip --version >/dev/null 2>&1; then
      "$PY" -m pip install -q --disable-pip-version-check "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION" "selenium==$SELENIUM_VERSION" "oras==$ORAS_VERSION" >&2
    else
      python3 -m pip --python "$PY" install -q --disable-pip-version-check "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION" "selenium==$SELENIUM_VERSION" "oras==$ORAS_VERSION" >&2
    fi
  fi
fi
echo "$PY"
