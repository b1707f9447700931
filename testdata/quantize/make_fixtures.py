#!/usr/bin/env python3
"""Write the F32 GGUF fixtures that make_references.sh quantizes with llama-quantize.

Usage: python3 make_fixtures.py OUT_DIR

  edge-F32.gguf  (committed) a 1-layer "llama" whose matrices hold the edge rows a quantizer
                 must get right bit for bit, quantized with `--pure` into every type:
                   blk.0.attn_q.weight   [256 x 24]: the edge rows (see EDGE below)
                   blk.0.attn_k.weight   [512 x 8]:  N(0, s) rows, s from 1e-3 to 1e3
                   blk.0.ffn_down.weight [288 x 8]:  a row length not a multiple of 256
                                                     (llama-quantize falls back: Q4_K -> Q5_0 ...)
                   blk.0.ffn_up.weight   [40 x 4]:   not a multiple of 32 (fallback -> F16)
                   token_embd.weight     [256 x 4],  blk.0.attn_norm.weight [256] (1-D: kept F32)
  mix-F16.gguf   (committed) an 8-layer llama, 4 heads / 1 KV head (GQA 4), untied output,
                 n_ff 288, matrices F16 (norms F32), 2 rows each, so the mixes' per-layer rules
                 (use_more_bits, the GQA and output/embedding rules, the 256 fallbacks) all show;
                 llama-quantize's per-tensor choice for every mix is in types-mix-<FTYPE>.txt.
  moe-F16.gguf   (committed) a 4-layer llama with 4 experts per layer (stacked
                 ffn_{gate,up,down}_exps, a router ffn_gate_inp), for MXFP4_MOE and the MoE rules
                 (types-moe-<FTYPE>.txt).

Weights: numpy PCG64 seed 4501; every file is the same bit for bit on every run (gguf 0.19.0).
"""
import os
import sys

import gguf
import numpy as np

SEED = 4501


def edge_rows(rng, cols):
    """Rows for attn_q (rows x cols): zeros, subnormals, outliers, constants, ties, scales."""
    r = []
    sub = lambda n: (rng.integers(1, 1 << 23, n).astype(np.uint32)).view(np.float32)  # noqa: E731
    r.append(np.zeros(cols, np.float32))  # 0 all zero
    r.append(sub(cols) * np.where(rng.random(cols) < 0.5, -1, 1).astype(np.float32))  # 1 subnormals
    x = sub(cols)
    x[17] = 1e-3
    r.append(x)  # 2 subnormals and one normal value
    x = (0.02 * rng.standard_normal(cols)).astype(np.float32)
    x[77] = 3e4
    r.append(x)  # 3 one huge outlier
    x = (0.02 * rng.standard_normal(cols)).astype(np.float32)
    x[5], x[100], x[200] = 1e4, -1e4, 2.5e3
    r.append(x)  # 4 outliers in several sub-blocks
    r.append(np.full(cols, 0.5, np.float32))  # 5 constant positive
    r.append(np.full(cols, -0.25, np.float32))  # 6 constant negative
    r.append(rng.random(cols).astype(np.float32))  # 7 all positive
    r.append(-rng.random(cols).astype(np.float32))  # 8 all negative
    x = rng.standard_normal(cols).astype(np.float32)
    x[:48] = 0
    x[160:192] = 0
    r.append(x)  # 9 all-zero sub-blocks inside blocks
    r.append((6.1e-5 * rng.standard_normal(cols)).astype(np.float32))  # 10 near f16's smallest normal
    r.append((1e-10 * rng.standard_normal(cols)).astype(np.float32))  # 11 tiny (f16 scales underflow)
    r.append((1e-20 * rng.standard_normal(cols)).astype(np.float32))  # 12 below GROUP_MAX_EPS-ish
    r.append(np.where(np.arange(cols) % 2 == 0, 1.0, -1.0).astype(np.float32))  # 13 alternating
    r.append((rng.integers(-16, 17, cols) / 2.0).astype(np.float32))  # 14 halves: rounding ties
    r.append(np.full(cols, -0.0, np.float32))  # 15 negative zeros
    for i, s in enumerate([1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 0.05]):  # 16..23
        x = (s * rng.standard_normal(cols)).astype(np.float32)
        if i % 2:
            x[:32] = 0  # a zero 32-block
        r.append(x)
    return np.stack(r)


def llama_header(w, layers, hidden, n_ff, heads, kv, vocab, name):
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)


def edge(path, rng):
    w = gguf.GGUFWriter(path, "llama")
    llama_header(w, 1, 256, 288, 4, 4, 4, "quantize-edge")
    # numpy (rows, cols) = GGUF (ne1, ne0).
    w.add_tensor("token_embd.weight", (0.1 * rng.standard_normal((4, 256))).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", (1 + 0.1 * rng.standard_normal(256)).astype(np.float32))
    w.add_tensor("blk.0.attn_q.weight", edge_rows(rng, 256))
    scales = np.array([1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 0.3], np.float32)[:, None]
    w.add_tensor("blk.0.attn_k.weight", (scales * rng.standard_normal((8, 512))).astype(np.float32))
    w.add_tensor("blk.0.ffn_down.weight", (0.1 * rng.standard_normal((8, 288))).astype(np.float32))
    w.add_tensor("blk.0.ffn_up.weight", (0.1 * rng.standard_normal((4, 40))).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def mix(path, rng, layers=8, experts=0):
    """Matrices F16 (the F16-GGUF source path), 1-D norms F32."""
    hidden, n_ff, heads, kv, vocab = 256, 288, 4, 1, 8
    w = gguf.GGUFWriter(path, "llama")
    llama_header(w, layers, hidden, n_ff, heads, kv, vocab, "quantize-mix")
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(2)
    m = lambda rows, cols: (0.1 * rng.standard_normal((rows, cols))).astype(np.float16)  # noqa: E731
    w.add_tensor("token_embd.weight", m(vocab, hidden))
    hd = hidden // heads
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(p + "attn_q.weight", m(2, hidden))
        w.add_tensor(p + "attn_k.weight", m(2, hidden))
        w.add_tensor(p + "attn_v.weight", m(kv * hd // 32, hidden))
        w.add_tensor(p + "attn_output.weight", m(2, hidden))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, np.float32))
        if experts:
            w.add_tensor(p + "ffn_gate_inp.weight", m(experts, hidden))
            w.add_tensor(p + "ffn_gate_exps.weight", (0.1 * rng.standard_normal((experts, 2, hidden))).astype(np.float16))
            w.add_tensor(p + "ffn_up_exps.weight", (0.1 * rng.standard_normal((experts, 2, hidden))).astype(np.float16))
            w.add_tensor(p + "ffn_down_exps.weight", (0.1 * rng.standard_normal((experts, 2, n_ff))).astype(np.float16))
        else:
            w.add_tensor(p + "ffn_gate.weight", m(2, hidden))
            w.add_tensor(p + "ffn_up.weight", m(2, hidden))
            w.add_tensor(p + "ffn_down.weight", m(2, n_ff))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output.weight", m(vocab, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    rng = np.random.Generator(np.random.PCG64(SEED))
    edge(os.path.join(out, "edge-F32.gguf"), rng)
    mix(os.path.join(out, "mix-F16.gguf"), rng)
    mix(os.path.join(out, "moe-F16.gguf"), rng, layers=4, experts=4)


if __name__ == "__main__":
    main(*sys.argv[1:])
