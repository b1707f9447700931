#!/usr/bin/env python3
"""Write synthetic importance matrices for the quantize fixtures, in llama.cpp's formats, for
`llama-quantize --imatrix` references (make_references.sh) and `gpack convert --imatrix` tests.

Usage: python3 make_imatrix.py DIR     (reads DIR/{edge-F32,mix-F16,moe-F16}.gguf)

Writes, for each model M in edge, mix, moe:
  M.imatrix      GGUF, as llama-imatrix writes it (tools/imatrix/imatrix.cpp save_imatrix):
                 general.type=imatrix, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size;
                 per weight W (sorted): W.in_sum2 [ne0, n_mat] and W.counts [1, n_mat] (F32).
  edge.imatrix.dat  the legacy format (save_imatrix_legacy) of edge's statistics.

Entries: every 2-D/3-D blk.* weight (what llama-imatrix collects without --process-output: no
output.weight, no token_embd.weight). The mean squares are log-normal over 8 decades with edge
cases a quantizer's weighted search must get right: a whole 32-column run of zeros (a sub-block
whose weights sum to 0), isolated zeros, subnormals, 1e12 outliers. A stacked-expert tensor has
one count per expert, expert 1 none (llama-quantize then uses weights of 1.0 for it).

numpy PCG64 seed 4502; the same bytes on every run (gguf 0.19.0).
"""
import os
import struct
import sys

import gguf
import numpy as np

SEED = 4502
CHUNK = 512


def mean_squares(rng, ne0):
    m = np.exp(rng.normal(0.0, 4.0, ne0)).astype(np.float32)
    if ne0 >= 64:
        m[32:64] = 0.0  # a whole 32-column sub-block with zero weight
    m[rng.integers(0, ne0, max(1, ne0 // 50))] = 0.0
    m[rng.integers(0, ne0, 2)] = np.float32(1e-40)  # subnormal
    m[rng.integers(0, ne0, 1)] = np.float32(1e12)
    return m


def stats(model_path, rng):
    r = gguf.GGUFReader(model_path)
    out = []
    for t in sorted(r.tensors, key=lambda t: t.name):
        shape = [int(x) for x in t.shape]  # ne0 first
        if not t.name.startswith("blk.") or len(shape) < 2 or "norm" in t.name or "ffn_gate_inp" in t.name:
            continue
        ne0 = shape[0]
        n_mat = shape[2] if len(shape) == 3 else 1
        counts = np.full(n_mat, 3 * CHUNK - 36, np.float32)  # 1500: .dat's ncall 3 rounds
        if n_mat > 1:
            counts[1] = 0
            counts[2] = 301
        sums = np.stack([mean_squares(rng, ne0) * c for c in counts]).astype(np.float32)
        out.append((t.name, sums, counts))
    return out


def write_gguf(path, entries):
    w = gguf.GGUFWriter(path, arch="imatrix")  # llama.cpp's loader ignores general.architecture
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic (make_imatrix.py)"])
    w.add_uint32("imatrix.chunk_count", 4)
    w.add_uint32("imatrix.chunk_size", CHUNK)
    for name, sums, counts in entries:
        w.add_tensor(name + ".in_sum2", sums)  # numpy (n_mat, ne0) = GGUF [ne0, n_mat]
        w.add_tensor(name + ".counts", counts.reshape(-1, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_dat(path, entries):
    """save_imatrix_legacy: ncall = ceil(max count / chunk), values sum/count*ncall (f32)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for name, sums, counts in entries:
            ncall = int((int(counts.max()) + CHUNK - 1) // CHUNK)
            f.write(struct.pack("<i", len(name)) + name.encode())
            f.write(struct.pack("<ii", ncall, sums.size))
            vals = (sums / counts[:, None]).astype(np.float32) * np.float32(ncall)
            f.write(vals.astype("<f4").tobytes())
        dataset = b"synthetic (make_imatrix.py)"
        f.write(struct.pack("<i", 4) + struct.pack("<i", len(dataset)) + dataset)


def main(d):
    rng = np.random.Generator(np.random.PCG64(SEED))
    for m, src in [("edge", "edge-F32.gguf"), ("mix", "mix-F16.gguf"), ("moe", "moe-F16.gguf")]:
        entries = stats(os.path.join(d, src), rng)
        write_gguf(os.path.join(d, m + ".imatrix"), entries)
        if m == "edge":
            write_dat(os.path.join(d, "edge.imatrix.dat"), entries)


if __name__ == "__main__":
    main(*sys.argv[1:])
