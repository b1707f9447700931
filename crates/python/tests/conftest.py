"""Shared fixtures of the gpack Python tests (run by scripts/test.sh).

Inputs are never optional: a missing model or binary fails the run instead
of skipping tests. The `gpack` CLI is the Rust reference the package is
compared with; scripts/test.sh points GPACK_BIN at the one `cargo test`
built.
"""

import os
import subprocess
from pathlib import Path

import pytest

import gpack

ROOT = Path(__file__).resolve().parents[3]
TESTDATA = ROOT / "testdata"
QUANT_TYPES = [
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4",
]


def _gpack_bin() -> Path:
    env = os.environ.get("GPACK_BIN")
    if env:
        p = Path(env)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        p = target / "debug" / "gpack"
    assert p.is_file(), f"no gpack binary at {p} (build it with cargo build -p gpack-cli, or set GPACK_BIN)"
    return p


@pytest.fixture(scope="session")
def gpack_bin() -> Path:
    return _gpack_bin()


def run_cli(*args, check=True):
    """Runs the gpack CLI; returns the CompletedProcess (text mode)."""
    r = subprocess.run([str(_gpack_bin()), *map(str, args)], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"gpack {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}"
    return r


@pytest.fixture(scope="session")
def smol_gguf() -> Path:
    cache = Path(os.environ.get("GPACK_CACHE", Path.home() / ".cache" / "gpack"))
    p = cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert p.is_file(), f"{p} is missing: scripts/fetch-models.sh fetches it"
    return p


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gpack-py")


@pytest.fixture(scope="session")
def smol_gpack(smol_gguf, workdir) -> Path:
    out = workdir / "smollm2.gpack"
    gpack.convert(smol_gguf, out, name="smollm2")
    return out


@pytest.fixture(scope="session")
def tiny_gpacks(workdir):
    """TYPE -> (gguf, gpack) for every tiny quant-type fixture, converted by gpack.convert."""
    out = {}
    for t in QUANT_TYPES:
        src = TESTDATA / "quant-types" / f"tiny-llama-256-{t}.gguf"
        assert src.is_file(), src
        dst = workdir / f"tiny-{t}.gpack"
        gpack.convert(src, dst)
        out[t] = (src, dst)
    return out
