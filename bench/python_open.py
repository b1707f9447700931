#!/usr/bin/env python3
"""gpack's Python package against the Python ecosystem, in one run.

1. Open + first tensor access: ``gpack.open(...).tensor(name)`` on SmolLM2's
   .gpack against ``safetensors.safe_open(..., framework="numpy").get_tensor(name)``
   on the same weights exported as safetensors (every tensor dequantized from
   the GGUF by gguf-py, as float32: what a safetensors copy of a quantized
   model holds; the export is made once and reused). Three accesses: a norm
   vector (F32 on both sides: a view of the mapping for gpack, a copy for
   safetensors), one Q4_1 matrix (dequantized by gpack; read as f32 by
   safetensors) and the Q8_0 token embedding (49152 x 576), plus gpack's
   zero-copy ``raw()`` of the embedding. Warm page cache (each file is read
   once before timing); rounds alternate gpack / safetensors.
2. First token: ``gpack.Model(path).generate(prompt, 1)`` (load + prefill of a
   5-token prompt + one greedy token) against llama-cpp-python's
   ``Llama(model_path=gguf)(prompt, max_tokens=1)`` on SmolLM2's GGUF, when
   llama-cpp-python is importable (bench/python.sh tries to install it).

Prints per-case medians (of --reps repetitions, in milliseconds) and the
ratio other/gpack (> 1: gpack is faster).

Usage: bench/python_open.py GGUF GPACK WORKDIR [--reps N]
"""

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np


def med(xs):
    return statistics.median(xs) * 1e3


def export_safetensors(gguf_path, out):
    """Every tensor of the GGUF, dequantized to float32, as safetensors."""
    if os.path.exists(out):
        return out
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    r = gguf.GGUFReader(gguf_path)
    tensors = {t.name: np.ascontiguousarray(dequantize(t.data, t.tensor_type).astype(np.float32)) for t in r.tensors}
    save_file(tensors, out + ".tmp")
    os.replace(out + ".tmp", out)
    return out


def read_all(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def bench_open(gp, st, reps):
    import gpack
    from safetensors import safe_open

    cases = [
        ("norm vector (F32, 576)", "blk.0.attn_norm.weight"),
        ("Q4_1 matrix blk.0.ffn_up (1536 x 576)", "blk.0.ffn_up.weight"),
        ("token_embd (Q8_0, 49152 x 576)", "token_embd.weight"),
    ]
    rows = []
    for label, name in cases:
        g, s = [], []
        for _ in range(reps):
            gc.collect()
            t = time.perf_counter()
            f = gpack.open(gp)
            a = f.tensor(name)
            float(a.reshape(-1)[-1])  # touch the data
            g.append(time.perf_counter() - t)
            del a, f
            gc.collect()
            t = time.perf_counter()
            with safe_open(st, framework="numpy") as sf:
                b = sf.get_tensor(name)
            float(b.reshape(-1)[-1])
            s.append(time.perf_counter() - t)
            del b
        rows.append((f"open + tensor(): {label}", med(g), "safetensors", med(s)))
    # raw(): the stored blocks, zero-copy.
    g, s = [], []
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        f = gpack.open(gp)
        r = f.raw("token_embd.weight")
        int(r[-1])
        g.append(time.perf_counter() - t)
        del r, f
        t = time.perf_counter()
        with safe_open(st, framework="numpy") as sf:
            b = sf.get_tensor("token_embd.weight")
        float(b.reshape(-1)[-1])
        s.append(time.perf_counter() - t)
        del b
    rows.append(("open + raw() of token_embd (zero-copy Q8_0 blocks)", med(g), "safetensors get_tensor", med(s)))
    return rows


def bench_first_token(gp, gg, reps, prompt="The capital of France is"):
    import gpack

    rows = []
    try:
        from llama_cpp import Llama
    except ImportError as e:
        print(f"llama-cpp-python: not importable ({e}); first-token comparison skipped", file=sys.stderr)
        Llama = None
    threads = int(os.environ.get("GPACK_THREADS", "2"))
    gl, gf, ll, lf = [], [], [], []
    out = None
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        m = gpack.Model(gp, verify="off")
        t1 = time.perf_counter()
        out = m.generate(prompt, 1)
        t2 = time.perf_counter()
        gl.append(t1 - t)
        gf.append(t2 - t1)
        del m
        if Llama is not None:
            gc.collect()
            t = time.perf_counter()
            llm = Llama(model_path=gg, n_ctx=2048, n_threads=threads, verbose=False)
            t1 = time.perf_counter()
            llm(prompt, max_tokens=1, temperature=0.0)
            t2 = time.perf_counter()
            ll.append(t1 - t)
            lf.append(t2 - t1)
            del llm
    name = "llama-cpp-python"
    lt = [a + b for a, b in zip(ll, lf)]
    gt = [a + b for a, b in zip(gl, gf)]
    rows.append(("Model(...) load", med(gl), name, med(ll) if ll else None))
    rows.append((f"generate(prompt, 1) after load ({out!r})", med(gf), name, med(lf) if lf else None))
    rows.append(("load + first token", med(gt), name, med(lt) if lt else None))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("gpack")
    ap.add_argument("workdir")
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    st = export_safetensors(a.gguf, os.path.join(a.workdir, "smollm2-f32.safetensors"))
    for p in (a.gpack, st, a.gguf):
        read_all(p)
    print(f"files: {a.gpack} ({os.path.getsize(a.gpack) >> 20} MiB), {st} ({os.path.getsize(st) >> 20} MiB)")
    rows = bench_open(a.gpack, st, a.reps) + bench_first_token(a.gpack, a.gguf, max(3, a.reps // 3))
    print(f"{'case':<62} {'gpack ms':>10} {'other':<24} {'other ms':>10} {'other/gpack':>12}")
    for case, g, other, o in rows:
        if o is None:
            print(f"{case:<62} {g:>10.3f} {other:<24} {'n/a':>10} {'n/a':>12}")
        else:
            print(f"{case:<62} {g:>10.3f} {other:<24} {o:>10.3f} {o / g:>11.2f}x")


if __name__ == "__main__":
    main()
