#!/usr/bin/env python3
"""Reference data for gpack-quant's exactness and error-budget tests.

Run with the project venv (gguf==0.19.0, numpy):

    /root/.cache/gpack/venv/bin/python testdata/quant/make_reference.py

Writes, next to this script:

* ``ref_<TYPE>.bin`` for every ggml type gpack-quant decodes: random valid
  blocks (fixed seed) with edge cases in the first blocks (all-zero block,
  +-0 scales, f16 max/min normal, smallest/largest subnormal scales; for
  IQ4_XS the 6-bit sub-scale edges, for MXFP4 the E8M0 exponent edges), and
  ``gguf.quants.dequantize`` of them. Layout (little-endian):
  ``b"GQRF" · u32 ggml_type · u32 rows · u32 cols · u64 n_block_bytes ·
  blocks · f32[rows*cols] dequantized``.
* ``quant_inputs.bin`` + ``quant_ref.json``: inputs for the quantizer error
  budget (Gaussian rows, and rows of SmolLM2-135M's token embedding when the
  model is present) and the RMSE that gguf's Q8_0 / Q4_0 / Q4_1 quantizers reach
  on them. ``quant_inputs.bin``: per data set ``u32 rows · u32 cols · f32[...]``.
* ``real_tensors.json`` + ``real_rows.bin``: real tensors located by file offset
  (tiny q8_0/f16 fixtures under testdata/tiny, and SmolLM2-135M-Instruct.Q4_1
  when present): type, shape, byte range, SHA-256 of the full dequantized
  tensor (f32 LE) and, for SmolLM2, the first two dequantized rows.

NaN/Inf scales are not generated: their NaN payloads are outside the
exactness guarantee.
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SMOL = "/root/.cache/gpack/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# Byte offsets of the f16 scale fields in each block type (ggml-common.h).
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}

EDGE_F16_BITS = [
    0x0000,  # +0
    0x8000,  # -0
    0x7BFF,  # max 65504
    0xFBFF,  # -65504
    0x0400,  # min normal
    0x0001,  # smallest subnormal
    0x03FF,  # largest subnormal
    0x83FF,  # negative subnormal
]


def random_finite_f16(rng, n):
    """f16 bits that are finite: mostly ordinary magnitudes, some anywhere."""
    v = (rng.standard_normal(n) * 0.02).astype(np.float16).view(np.uint16)
    wild = rng.integers(0, 0x10000, n, dtype=np.uint32).astype(np.uint16)
    wild = np.where((wild & 0x7C00) == 0x7C00, wild & 0x83FF, wild)  # no Inf/NaN
    pick = rng.random(n) < 0.2
    return np.where(pick, wild, v).astype(np.uint16)


def make_blocks(rng, qtype, n_blocks, fields=None):
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, ts), dtype=np.uint16).astype(np.uint8)
    if fields is None:
        fields = F16_FIELDS[qtype]
    for off in fields:
        bits = random_finite_f16(rng, n_blocks)
        for i, e in enumerate(EDGE_F16_BITS):
            bits[i] = e if off == fields[0] else EDGE_F16_BITS[(i + 3) % len(EDGE_F16_BITS)]
        blocks[:, off:off + 2] = bits.view(np.uint8).reshape(n_blocks, 2)
    blocks[len(EDGE_F16_BITS)] = 0  # all-zero block
    blocks[len(EDGE_F16_BITS) + 1, :] = 0xFF if qtype != T.Q8_0 else 0x80  # saturated codes ...
    for off in fields:  # ... with an ordinary scale
        blocks[len(EDGE_F16_BITS) + 1, off:off + 2] = np.array([0x3C00], dtype=np.uint16).view(np.uint8)
    return blocks


def write_ref(name, qtype, rows, cols, raw, deq):
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    deq = np.ascontiguousarray(deq, dtype=np.float32).reshape(-1)
    assert deq.size == rows * cols
    with open(os.path.join(HERE, f"ref_{name}.bin"), "wb") as f:
        f.write(b"GQRF")
        f.write(struct.pack("<IIIQ", int(qtype), rows, cols, raw.size))
        f.write(raw.tobytes())
        f.write(deq.astype("<f4").tobytes())


def make_block_refs(rng):
    for qtype in F16_FIELDS:
        bs, ts = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = (8, 256) if bs == 32 else (4, 2048)
        n_blocks = rows * cols // bs
        blocks = make_blocks(rng, qtype, n_blocks)
        raw = blocks.reshape(rows, cols // bs * ts)
        deq = dequantize(raw, qtype)
        assert deq.shape == (rows, cols), deq.shape
        write_ref(qtype.name, qtype, rows, cols, raw, deq)

    rows, cols = 8, 64
    # F16: random finite values incl. subnormals and signed zeros.
    bits = random_finite_f16(rng, rows * cols)
    bits[: len(EDGE_F16_BITS)] = EDGE_F16_BITS
    raw = bits.astype("<u2").reshape(rows, cols)
    write_ref("F16", T.F16, rows, cols, raw, dequantize(raw.view(np.uint8), T.F16))
    # BF16: random bits without NaN.
    b = rng.integers(0, 0x10000, rows * cols, dtype=np.uint32).astype(np.uint16)
    b = np.where((b & 0x7F80) == 0x7F80, b & 0xFF7F, b).astype("<u2")
    b[:4] = [0x0000, 0x8000, 0x0001, 0x7F7F]
    raw = b.reshape(rows, cols)
    write_ref("BF16", T.BF16, rows, cols, raw, dequantize(raw.view(np.uint8), T.BF16))
    # F32
    v = (rng.standard_normal(rows * cols) * 3).astype("<f4")
    v[:3] = [0.0, -0.0, 1e-40]
    raw = v.reshape(rows, cols)
    write_ref("F32", T.F32, rows, cols, raw, raw)


# The non-linear 4-bit types, generated with their own seed after the types
# above so that adding them left every earlier reference file byte-identical.
NONLINEAR_SEED = 20261201

# E8M0 exponents at the edges of ggml's e8m0_to_fp32_half: 0 and 1 give f32
# subnormals, 2 the smallest normal, 127/128 around 1, 254/255 the largest
# (255 is not NaN in ggml).
EDGE_E8M0 = [0, 1, 2, 127, 128, 254, 255]


def make_nonlinear_refs():
    rng = np.random.default_rng(NONLINEAR_SEED)
    n_edge = len(EDGE_F16_BITS)

    # IQ4_NL: {f16 d; u8 qs[16]}: the f16 edge scales, an all-zero block,
    # saturated nibbles (level 113) with d = 1, random nibbles elsewhere.
    rows, cols = 8, 256
    blocks = make_blocks(rng, T.IQ4_NL, rows * cols // 32, fields=[0])
    write_block_ref(T.IQ4_NL, rows, cols, blocks)

    # IQ4_XS: {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: the f16 edge
    # scales, an all-zero super-block, saturated codes and 6-bit scales
    # (ls = 63), then the sub-scale edges with d = 1 and d = -1: every ls = 0
    # (dl = -32 d), every ls = 32 (dl = +-0), and a negative subnormal d with
    # random sub-scales.
    rows, cols = 4, 2048
    blocks = make_blocks(rng, T.IQ4_XS, rows * cols // 256, fields=[0])
    i = n_edge + 2
    for d_bits in (0x3C00, 0xBC00):
        for sh, sl in ((0x0000, 0x00), (0xAAAA, 0x00)):
            blocks[i, 0:2] = np.array([d_bits], dtype="<u2").view(np.uint8)
            blocks[i, 2:4] = np.array([sh], dtype="<u2").view(np.uint8)
            blocks[i, 4:8] = sl
            i += 1
    blocks[i, 0:2] = np.array([0x8001], dtype="<u2").view(np.uint8)
    write_block_ref(T.IQ4_XS, rows, cols, blocks)

    # MXFP4: {u8 e; u8 qs[16]}: the E8M0 edges (with random nibbles; 254/255
    # overflow to +-inf for the larger levels, as in ggml), an all-zero block,
    # all levels at e = 127, then mostly ordinary exponents and some anywhere.
    rows, cols = 8, 256
    n = rows * cols // 32
    bs, ts = gguf.GGML_QUANT_SIZES[T.MXFP4]
    blocks = rng.integers(0, 256, (n, ts), dtype=np.uint16).astype(np.uint8)
    e = rng.integers(115, 135, n, dtype=np.uint16).astype(np.uint8)
    wild = rng.random(n) < 0.2
    e = np.where(wild, rng.integers(0, 256, n, dtype=np.uint16).astype(np.uint8), e)
    e[: len(EDGE_E8M0)] = EDGE_E8M0
    blocks[:, 0] = e
    blocks[len(EDGE_E8M0)] = 0
    blocks[len(EDGE_E8M0) + 1, 0] = 127
    blocks[len(EDGE_E8M0) + 1, 1:] = np.array([(k | ((15 - k) << 4)) for k in range(16)], dtype=np.uint8)
    write_block_ref(T.MXFP4, rows, cols, blocks)


def write_block_ref(qtype, rows, cols, blocks):
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    raw = blocks.reshape(rows, cols // bs * ts)
    with np.errstate(over="ignore"):
        deq = dequantize(raw, qtype)
    assert deq.shape == (rows, cols), deq.shape
    write_ref(qtype.name, qtype, rows, cols, raw, deq)


def sha_f32(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def tensor_entries(path, rel, want, rows_out):
    r = gguf.GGUFReader(path)
    out = []
    for t in r.tensors:
        if want is not None and t.name not in want:
            continue
        if t.tensor_type not in (T.Q8_0, T.F16, T.F32, T.Q4_1, T.BF16):
            continue
        ne = [int(x) for x in t.shape]
        cols = ne[0]
        rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
        raw = np.asarray(t.data).view(np.uint8).reshape(rows, -1)
        deq = dequantize(raw, t.tensor_type).reshape(rows, cols)
        e = {
            "file": rel,
            "name": t.name,
            "type": t.tensor_type.name,
            "cols": cols,
            "rows": rows,
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
            "sha256_f32": sha_f32(deq),
        }
        if rows_out is not None:
            e["first_rows_offset"] = rows_out.tell()
            e["first_rows"] = 2
            rows_out.write(np.ascontiguousarray(deq[:2], dtype="<f4").tobytes())
        out.append(e)
    return out


def rmse(x, qtype):
    q = quantize(x, qtype)
    d = dequantize(q, qtype)
    return float(np.sqrt(np.mean((d.astype(np.float64) - x.astype(np.float64)) ** 2)))


def main():
    rng = np.random.default_rng(20261129)
    make_block_refs(rng)
    make_nonlinear_refs()

    entries = []
    tiny = os.path.join(ROOT, "testdata", "tiny")
    for arch in sorted(os.listdir(tiny)) if os.path.isdir(tiny) else []:
        for kind in ("q8_0", "f16"):
            p = os.path.join(tiny, arch, f"{arch}-{kind}.gguf")
            if os.path.exists(p):
                entries += tensor_entries(p, os.path.relpath(p, ROOT), None, None)

    datasets = {}
    g = rng.standard_normal((64, 256)).astype(np.float32) * 0.05
    g[0, :32] = 0.0  # an all-zero group
    g[1, :32] = 1e-3  # a constant group
    datasets["gaussian"] = g
    with open(os.path.join(HERE, "real_rows.bin"), "wb") as rows_out:
        if os.path.exists(SMOL):
            want = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"}
            entries += tensor_entries(SMOL, SMOL, want, rows_out)
            rd = gguf.GGUFReader(SMOL)
            emb = next(t for t in rd.tensors if t.name == "token_embd.weight")
            raw = np.asarray(emb.data).view(np.uint8).reshape(int(emb.shape[1]), -1)
            # 64 rows spread over the vocabulary.
            idx = np.linspace(0, raw.shape[0] - 1, 64).astype(int)
            datasets["smollm2_token_embd"] = dequantize(raw[idx], T.Q8_0).astype(np.float32)
            up = next(t for t in rd.tensors if t.name == "blk.0.ffn_up.weight")
            rawu = np.asarray(up.data).view(np.uint8).reshape(int(up.shape[1]), -1)
            datasets["smollm2_ffn_up_q4_1"] = dequantize(rawu[:64], T.Q4_1).astype(np.float32)
        else:
            print("note: SmolLM2 model absent; real-model references skipped", file=sys.stderr)

    ref = {}
    with open(os.path.join(HERE, "quant_inputs.bin"), "wb") as f:
        for name, x in datasets.items():
            f.write(struct.pack("<II", x.shape[0], x.shape[1]))
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
            ref[name] = {
                "rows": int(x.shape[0]),
                "cols": int(x.shape[1]),
                "Q8_0": rmse(x, T.Q8_0),
                "Q4_0": rmse(x, T.Q4_0),
                "Q4_1": rmse(x, T.Q4_1),
            }
    with open(os.path.join(HERE, "quant_ref.json"), "w") as f:
        json.dump({"gguf_version": "0.19.0", "datasets": list(datasets), "rmse": ref}, f, indent=1, sort_keys=True)
    with open(os.path.join(HERE, "real_tensors.json"), "w") as f:
        json.dump(entries, f, indent=1, sort_keys=True)
    print(f"{len(entries)} real tensors, {len(datasets)} quantizer data sets")


if __name__ == "__main__":
    main()
