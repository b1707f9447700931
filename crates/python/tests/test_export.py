"""gpack.export: `gpack export` as a function. A .gpack converted by
gpack.convert (quant="keep") exports back to its source GGUF, metadata and
tensor bytes (read with gguf-py); the report is the CLI's `--json` report;
failures raise GpackError naming the file and leave nothing behind; an
existing output is refused without force, as by the CLI."""

import json
import re

import gguf
import numpy as np
import pytest

import gpack
from conftest import QUANT_TYPES, TESTDATA, run_cli

REPORT_KEYS = ["schema", "output", "size", "metadata_keys", "tensors", "dequantized_to_f32", "seconds"]


def gguf_contents(path):
    """(metadata fields, tensors) of a GGUF as gguf-py reads it: fields in
    file order as (name, types, value); tensors sorted by name as (name, type,
    shape, bytes)."""
    r = gguf.GGUFReader(path)
    fields = [(name, [int(t) for t in f.types], f.contents()) for name, f in r.fields.items()]
    tensors = sorted(
        (t.name, t.tensor_type.name, [int(d) for d in t.shape], np.asarray(t.data).tobytes())
        for t in r.tensors
    )
    return fields, tensors


def check_report(rep, out, n_tensors):
    assert list(rep) == REPORT_KEYS
    assert rep["schema"] == "gpack.export.v1"
    assert rep["output"] == str(out)
    assert rep["size"] == out.stat().st_size
    assert rep["tensors"] == n_tensors
    assert isinstance(rep["metadata_keys"], int) and rep["metadata_keys"] > 0
    assert isinstance(rep["seconds"], float) and rep["seconds"] >= 0


def leftovers(d, *keep):
    """Files in directory `d` other than `keep` (outputs, temporary files)."""
    return sorted(p.name for p in d.iterdir() if p not in keep)


@pytest.mark.parametrize("qtype", QUANT_TYPES)
def test_keep_conversion_exports_the_source_back(tiny_gpacks, tmp_path, qtype):
    src, g = tiny_gpacks[qtype]
    out = tmp_path / f"tiny-{qtype}.gguf"
    rep = gpack.export(g, out)
    f0, t0 = gguf_contents(src)
    f1, t1 = gguf_contents(out)
    check_report(rep, out, len(t0))
    assert rep["dequantized_to_f32"] == []
    # GGUF.version, GGUF.tensor_count, GGUF.kv_count, then every key in order.
    assert rep["metadata_keys"] == len(f0) - 3
    assert [f[0] for f in f1] == [f[0] for f in f0]
    for a, b in zip(f0, f1):
        assert a == b, f"metadata {a[0]} differs"
    assert [t[:3] for t in t1] == [t[:3] for t in t0]
    for a, b in zip(t0, t1):
        assert a[3] == b[3], f"{qtype}: tensor {a[0]} differs"


def test_report_and_file_equal_the_clis(tiny_gpacks, tmp_path):
    _, g = tiny_gpacks["Q4_K"]
    out_py, out_cli = tmp_path / "py.gguf", tmp_path / "cli.gguf"
    rep = gpack.export(g, out_py)
    cli = json.loads(run_cli("export", g, "-o", out_cli, "--json").stdout)
    assert list(rep) == list(cli) == REPORT_KEYS
    for k in REPORT_KEYS:
        if k not in ("output", "seconds"):
            assert rep[k] == cli[k], k
    assert cli["output"] == str(out_cli)
    assert out_py.read_bytes() == out_cli.read_bytes()


def test_int8_tensors_come_back_as_their_f32_values(tmp_path):
    src = TESTDATA / "quant-types" / "tiny-llama-256-F16.gguf"
    g = tmp_path / "int8.gpack"
    gpack.convert(src, g, quant="int8")
    out = tmp_path / "int8.gguf"
    rep = gpack.export(g, out)
    _, t0 = gguf_contents(src)
    _, t1 = gguf_contents(out)
    check_report(rep, out, len(t0))
    deq = rep["dequantized_to_f32"]
    assert deq and set(deq) <= {t[0] for t in t0}
    reader = gguf.GGUFReader(out)
    with gpack.open(g) as f:
        for t in reader.tensors:
            if t.name in deq:
                assert t.tensor_type.name == "F32", t.name
                # The values gpack computes from the int8 codes, bit for bit.
                want = f.tensor(t.name).reshape(-1)
                got = np.asarray(t.data).reshape(-1)
                assert got.tobytes() == want.astype(np.float32).tobytes(), t.name
    # The rest is the source's, byte for byte.
    for a, b in zip(t0, t1):
        if a[0] not in deq:
            assert a == b, a[0]


def corrupt(kind, good, path):
    if kind == "junk":
        path.write_bytes(b"not a gpack at all, just some bytes here " * 8)
    elif kind == "truncated":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("kind", ["missing", "junk", "truncated", "empty"])
def test_missing_or_corrupt_source_raises_and_leaves_nothing(tiny_gpacks, tmp_path, kind):
    _, good = tiny_gpacks["Q8_0"]
    src = tmp_path / f"{kind}.gpack"
    if kind != "missing":
        corrupt(kind, good, src)
    out = tmp_path / "out.gguf"
    with pytest.raises(gpack.GpackError, match=re.escape(str(src))) as e:
        gpack.export(src, out)
    assert not out.exists()
    assert leftovers(tmp_path, src) == []
    # The CLI fails the same way, with the same message.
    r = run_cli("export", src, "-o", out, check=False)
    assert r.returncode == 1
    assert str(e.value) in r.stderr
    assert leftovers(tmp_path, src) == []


def test_existing_output_needs_force(tiny_gpacks, tmp_path):
    src, g = tiny_gpacks["Q8_0"]
    out = tmp_path / "out.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(gpack.GpackError, match="already exists") as e:
        gpack.export(g, out)
    assert str(out) in str(e.value)
    assert out.read_bytes() == b"keep me"
    # The CLI refuses it the same way.
    r = run_cli("export", g, "-o", out, check=False)
    assert r.returncode == 1 and str(e.value) in r.stderr
    assert out.read_bytes() == b"keep me"
    # Refused before the source is read: a missing source is not the error.
    with pytest.raises(gpack.GpackError, match="already exists"):
        gpack.export(tmp_path / "missing.gpack", out)
    # A failed export with force keeps the existing file, and leaves no
    # temporary file.
    bad = corrupt("junk", g, tmp_path / "bad.gpack")
    with pytest.raises(gpack.GpackError, match=re.escape(str(bad))):
        gpack.export(bad, out, force=True)
    assert out.read_bytes() == b"keep me"
    assert leftovers(tmp_path, out, bad) == []
    # With force it is replaced.
    rep = gpack.export(g, out, force=True)
    check_report(rep, out, len(gguf_contents(src)[1]))
    assert gguf_contents(out)[1] == gguf_contents(src)[1]
    assert leftovers(tmp_path, out, bad) == []


def test_signature():
    with pytest.raises(TypeError):
        gpack.export("a.gpack", "b.gguf", True)  # force is keyword-only
    assert "gpack export" in gpack.export.__doc__
    assert "export" in gpack.__all__
