"""gpack.open: tensors against gguf-py's dequantization and the CLI's index,
zero-copy views of the mapping, lifetimes, verification of damaged files."""

import gc
import json
import os
import shutil

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

import gpack
from conftest import QUANT_TYPES, run_cli


def mapped_file_of(addr):
    """The file this process maps at `addr` (from /proc/self/maps), or None."""
    with open("/proc/self/maps") as m:
        for line in m:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return parts[5].strip() if len(parts) == 6 else ""
    return None


def address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("qtype", QUANT_TYPES)
def test_tensor_values_equal_gguf_dequantization(tiny_gpacks, qtype):
    src, dst = tiny_gpacks[qtype]
    reader = gguf.GGUFReader(src)
    with gpack.open(dst) as f:
        assert len(f) == len(reader.tensors)
        for t in reader.tensors:
            want = dequantize(t.data, t.tensor_type).astype(np.float32)
            got = f.tensor(t.name)
            assert got.shape == tuple(int(d) for d in reversed(t.shape)), t.name
            assert got.shape == want.shape, t.name
            # Bit for bit: ggml's dequantization is gguf-py's.
            assert np.array_equal(got.astype(np.float32), want, equal_nan=True), f"{qtype} {t.name}"
            info = f.tensors[t.name]
            assert info["type"] == t.tensor_type.name
            raw = f.raw(t.name)
            assert raw.dtype == np.uint8 and raw.nbytes == t.n_bytes
            gbytes = np.asarray(t.data).view(np.uint8).reshape(-1)
            if info["layout"] in ("F32", "F16", "BF16", "raw"):
                assert np.array_equal(raw, gbytes), t.name
            else:
                # Rows16: the same ggml blocks, interleaved by 16 rows, so
                # the same bytes in another order.
                assert info["layout"] == t.tensor_type.name + "x16"
                assert np.array_equal(np.sort(raw), np.sort(gbytes)), t.name


def test_f16_f32_are_views_and_bf16_is_widened(tiny_gpacks):
    for qtype, dtype in (("F32", np.float32), ("F16", np.float16), ("BF16", np.float32)):
        with gpack.open(tiny_gpacks[qtype][1]) as f:
            lo, n = f.mapping
            a = f.tensor("blk.0.ffn_up.weight")
            assert a.dtype == dtype
            inside = lo <= address(a) < lo + n
            assert inside == (qtype != "BF16")
            assert f.tensors["blk.0.ffn_up.weight"]["view"] == (qtype != "BF16")
            if qtype != "BF16":
                assert not a.flags.writeable and not a.flags.owndata
            else:
                assert a.flags.writeable


def test_smollm2_index_equals_cli_inspect(smol_gpack):
    d = json.loads(run_cli("inspect", smol_gpack, "--json").stdout)
    with gpack.open(smol_gpack) as f:
        assert f.digest == d["digest"]
        assert [s["name"] for s in f.sections] == [s["name"] for s in d["sections"]]
        assert [s["sha256"] for s in f.sections] == [s["sha256"] for s in d["sections"]]
        assert [(s["offset"], s["size"]) for s in f.sections] == [(s["offset"], s["size"]) for s in d["sections"]]
        ours = f.tensors
        assert sorted(ours) == sorted(t["name"] for t in d["tensors"])
        for t in d["tensors"]:
            o = ours[t["name"]]
            assert o["type"] == t["type"]
            assert list(o["shape"]) == list(reversed(t["dims"]))
            assert (o["section"], o["offset"], o["size"]) == (t["section"], t["offset"], t["size"])
        md = f.metadata
        assert md["general.architecture"] == "llama"
        assert md["llama.block_count"] == 30
        assert len(md["tokenizer.ggml.tokens"]) == 49152


def test_smollm2_tensors_equal_gguf(smol_gguf, smol_gpack):
    reader = gguf.GGUFReader(smol_gguf)
    names = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
             "blk.0.attn_v.weight", "blk.7.ffn_up.weight", "blk.29.ffn_down.weight",
             "output_norm.weight"}
    with gpack.open(smol_gpack) as f:
        for t in reader.tensors:
            if t.name in names:
                want = dequantize(t.data, t.tensor_type)
                assert np.array_equal(f.tensor(t.name), want), t.name


def test_raw_view_is_the_mapping(smol_gpack):
    f = gpack.open(smol_gpack)
    lo, n = f.mapping
    for name in ("blk.0.attn_norm.weight", "blk.3.ffn_gate.weight", "token_embd.weight"):
        r = f.raw(name)
        a = address(r)
        assert lo <= a and a + r.nbytes <= lo + n
        # The kernel says the page is a mapping of this very file.
        assert mapped_file_of(a) == os.path.realpath(smol_gpack)
        assert not r.flags.writeable and not r.flags.owndata
        with pytest.raises(ValueError):
            r[0] = 1
    # Two arrays over the same bytes of the mapping share memory.
    v = f.tensor("blk.0.attn_norm.weight")
    assert np.shares_memory(v, f.raw("blk.0.attn_norm.weight"))
    # Section offsets agree with the addresses: raw of a dense_pack tensor
    # starts at section offset + tensor offset.
    sec = {s["name"]: s for s in f.sections}
    info = f.tensors["blk.0.attn_norm.weight"]
    assert address(v) == lo + sec[info["section"]]["offset"] + info["offset"]
    f.close()


def test_views_outlive_the_file(smol_gpack):
    path = os.path.realpath(smol_gpack)
    f = gpack.open(smol_gpack)
    v = f.tensor("output_norm.weight")
    r = f.raw("blk.1.attn_q.weight")
    before_v, before_r = v.copy(), r.copy()
    addr = address(r)
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.tensor("output_norm.weight")
    del f
    gc.collect()
    # The views keep the mapping alive on their own.
    assert mapped_file_of(addr) == path
    assert np.array_equal(v, before_v) and np.array_equal(r, before_r)
    # A view of a view too.
    sub = r[10:20]
    del v, r
    gc.collect()
    assert mapped_file_of(addr) == path
    assert np.array_equal(sub, before_r[10:20])
    del sub
    gc.collect()
    # The last view gone, the file is unmapped.
    assert mapped_file_of(addr) != path


def test_context_manager_and_errors(smol_gpack, workdir):
    with gpack.open(smol_gpack) as f:
        assert "token_embd.weight" in f
        with pytest.raises(KeyError, match="nope"):
            f.tensor("nope")
        with pytest.raises(KeyError):
            f.raw("nope")
    assert f.closed
    with pytest.raises(ValueError):
        gpack.open(smol_gpack, verify="sometimes")
    with pytest.raises(gpack.GpackError, match="No such file|not found|open"):
        gpack.open(workdir / "missing.gpack")
    junk = workdir / "junk.gpack"
    junk.write_bytes(b"not a gpack at all" * 100)
    with pytest.raises(gpack.GpackError, match="magic"):
        gpack.open(junk)


def damaged_copy(src, dst, section):
    """A copy of `src` with one byte flipped in the middle of `section`."""
    shutil.copyfile(src, dst)
    with gpack.open(src) as f:
        s = next(s for s in f.sections if s["name"] == section)
    pos = s["offset"] + s["size"] // 2
    with open(dst, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0x01]))
    return dst


@pytest.mark.parametrize("section", ["native_dense", "dense_pack", "tokenizer_bin"])
def test_damaged_section_is_named(smol_gpack, workdir, section):
    bad = damaged_copy(smol_gpack, workdir / f"bad-{section}.gpack", section)
    # The CLI names it too.
    cli = run_cli("verify", bad, check=False)
    assert cli.returncode == 1 and section in cli.stdout + cli.stderr
    f = gpack.open(bad)  # the quick check does not hash payloads
    with pytest.raises(gpack.GpackError, match=section):
        f.verify()
    with pytest.raises(gpack.GpackError, match=section):
        gpack.open(bad, verify="full")
    with pytest.raises(gpack.GpackError, match=section):
        gpack.Model(bad, verify="before")
    gpack.open(smol_gpack, verify="full").verify()  # the original is fine


def test_truncated_file_raises(smol_gpack, workdir):
    bad = workdir / "truncated.gpack"
    data = open(smol_gpack, "rb").read()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(gpack.GpackError, match="truncated"):
        gpack.open(bad)
    with pytest.raises(gpack.GpackError):
        gpack.Model(bad)
    with pytest.raises(gpack.GpackError):
        gpack.Tokenizer(bad)


def test_convert_report_and_refusals(smol_gguf, workdir):
    out = workdir / "conv.gpack"
    rep = gpack.convert(smol_gguf, out, quant="keep", name="x")
    assert rep["schema"] == "gpack.convert.v1" and rep["output"] == str(out)
    assert run_cli("verify", out).returncode == 0
    with pytest.raises(gpack.GpackError, match="already exists"):
        gpack.convert(smol_gguf, out)
    rep = gpack.convert(smol_gguf, out, force=True, quant="int8")
    assert rep["quant"] == "int8"
    with gpack.open(out) as f:
        assert f.manifest["convert"]["quant"] == "int8"
        assert f.digest == rep["digest"]
    with pytest.raises(ValueError):
        gpack.convert(smol_gguf, out, quant="int3")
    with pytest.raises(gpack.GpackError):
        gpack.convert(workdir / "missing.gguf", workdir / "never.gpack")
    assert not (workdir / "never.gpack").exists()
