#!/usr/bin/env bash
# The Python package's tests (crates/python), run by scripts/test.sh after
# `cargo test` (whose dev-profile `gpack` binary the tests compare with).
# Builds the package once, in the dev profile (the kernels and the runtime
# optimized as for the Rust tests, Cargo.toml; most dependencies are those
# `cargo test --workspace` already built: minutes of CI saved over a
# release-style profile), with `pip install ./crates/python`
# (maturin, into the workspace's target dir, so a rerun is incremental), into
# a venv of its own with the pinned test dependencies, then runs pytest.
# Needs python3 (>= 3.9) with venv and pip, and the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${GPACK_CACHE:-$HOME/.cache/gpack}
VENV=${GPACK_PY_VENV:-$CACHE/py-test-venv}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
export CARGO_TARGET_DIR=$TARGET
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
"${PIP[@]}" install -r crates/python/tests/requirements.txt
# Ray Serve for test_ray.py (gpack[ray]'s extra; large, so a file of its own).
"${PIP[@]}" install -r crates/python/tests/requirements-ray.txt
# maturin from the venv (no build isolation: the same interpreter every run,
# so cargo reuses what it built); --locked as every cargo command here.
PATH="$VENV/bin:$PATH" MATURIN_PEP517_ARGS="--locked --profile dev" \
  "${PIP[@]}" install --no-build-isolation --force-reinstall --no-deps ./crates/python
[ -x "$TARGET/debug/gpack" ] || cargo build --locked -p gpack-cli
GPACK_BIN="$TARGET/debug/gpack" "$VENV/bin/python" -m pytest -q -p no:cacheprovider crates/python/tests
