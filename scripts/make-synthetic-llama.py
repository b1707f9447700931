#!/usr/bin/env python3
"""Write a llama-architecture (or Gemma 2, Phi-3) f16 GGUF with random weights at a real model's shape,
carrying the tokenizer of another GGUF (SmolLM2's: vocab 49152), for speed
comparisons at sizes that do not fit in cache (issue 13, "Measure").

Usage: make-synthetic-llama.py SHAPE OUT.gguf TOKENIZER_SRC.gguf
  SHAPE  1b (Llama-3.2-1B body), 8b (Llama-3.1-8B body), gemma2-2b (Gemma-2-2B body),
         phi3.5-mini (Phi-3.5-mini body) or tiny, see SHAPES.
Then quantize with `llama-quantize OUT.gguf OUT.Q4_K_M.gguf Q4_K_M`
(scripts/make-bench-models.sh does both).

Tested with Python 3.11, numpy 2.4.6, gguf 0.19.0 (`python3 -m pip install numpy gguf==0.19.0`).

Tensors are streamed to disk: the header, metadata and tensor infos are written
first (GGUFWriter's lower-level calls), then each tensor's data chunk by chunk
(CHUNK_ELEMS values at a time), so the 8B (14.8 GB of f16) needs ~310 MB of RAM
(peak RSS measured, same as the 1B), not the whole model as GGUFWriter.add_tensor +
write_tensors_to_file would. The 8B took ~7 min on the 2-core machine (disk-bound).
The output is written to OUT.gguf.tmp and renamed when complete.

Weights: N(0, 0.02^2) from numpy's PCG64 with a fixed seed (SEED), stored as f16;
norm vectors are 1.0 (f32); separate output.weight (not tied). Speed does not depend
on the values, so these measure what real models of that size cost.
"""
import os
import sys

import gguf
import numpy as np

SHAPES = {  # n_embd, n_layer, n_ff, n_head, n_kv[, arch, head_dim]
    "1b": (2048, 16, 8192, 32, 8),  # Llama-3.2-1B body
    "8b": (4096, 32, 14336, 32, 8),  # Llama-3.1-8B body
    "tiny": (256, 2, 512, 4, 2),  # for testing the script itself
    # Gemma-2-2B body (issue 14's per-family measure): head_dim 256, pre and post norms,
    # soft-caps 50 / 30, sliding window 4096 on even layers, embeddings as the head.
    "gemma2-2b": (2304, 26, 9216, 8, 4, "gemma2", 256),
    # Phi-3.5-mini body: fused attn_qkv and gate‖up ffn_up, LongRoPE over an original 4096
    # (factors 1.0 here: speed does not depend on them; 128K context as released).
    "phi3.5-mini": (3072, 32, 8192, 32, 32, "phi3", 96),
}
SEED = 0
STD = 0.02
CHUNK_ELEMS = 1 << 24  # 16 Mi values per chunk: 64 MB of f32 + 32 MB of f16


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    shape, out, src = sys.argv[1:]
    E, L, F, H, KV, *rest = SHAPES[shape]
    arch, hd = rest if rest else ("llama", E // H)

    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(out + ".tmp", arch)
    # llama.cpp's vocabulary loader looks up Phi-3's "</s>" (absent from SmolLM2's vocabulary)
    # in any model whose name contains "phi3" or "phi-3": the Phi-3 body is "synthetic-phi_-…".
    w.add_name(f"synthetic-{arch}-{shape}".replace("phi3", "phi_"))
    w.add_context_length(131072 if arch == "phi3" else 8192)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    if arch == "gemma2":
        # What llama.cpp's Gemma2Model converter writes (no RoPE keys: base 10000).
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
        w.add_layer_norm_rms_eps(1e-6)
    elif arch == "phi3":
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(10000.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_attn_factors(1.1902380714238083)  # sqrt(1 + ln 32 / ln 4096)
        w.add_sliding_window(0)
        w.add_layer_norm_rms_eps(1e-5)
    else:
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(500000.0)
        w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Every tokenizer.* key of the source, copied with its type (strings as raw bytes).
    n_vocab = None
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(name, val, t, sub_type=sub)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]), t)
        else:
            w.add_key_value(name, f.parts[f.data[0]][0].item(), t)
    if n_vocab is None:
        sys.exit(f"{src}: no tokenizer.ggml.tokens")
    if arch == "llama":
        w.add_vocab_size(n_vocab)

    # (name, rows, cols, kind): rows = ne1, cols = ne0 (contiguous).
    tensors = [
        ("token_embd.weight", n_vocab, E, "mat"),
        ("output_norm.weight", 1, E, "ones"),
    ]
    if arch in ("llama", "phi3"):
        tensors.append(("output.weight", n_vocab, E, "mat"))
    if arch == "phi3":
        tensors = [("rope_factors_long.weight", 1, hd // 2, "ones"),
                   ("rope_factors_short.weight", 1, hd // 2, "ones")] + tensors
    for i in range(L):
        p = f"blk.{i}."
        if arch == "phi3":
            tensors += [
                (p + "attn_norm.weight", 1, E, "ones"),
                (p + "attn_qkv.weight", (H + 2 * KV) * hd, E, "mat"),
                (p + "attn_output.weight", E, H * hd, "mat"),
                (p + "ffn_norm.weight", 1, E, "ones"),
                (p + "ffn_up.weight", 2 * F, E, "mat"),
                (p + "ffn_down.weight", E, F, "mat"),
            ]
            continue
        tensors += [
            (p + "attn_norm.weight", 1, E, "ones"),
            (p + "attn_q.weight", H * hd, E, "mat"),
            (p + "attn_k.weight", KV * hd, E, "mat"),
            (p + "attn_v.weight", KV * hd, E, "mat"),
            (p + "attn_output.weight", E, H * hd, "mat"),
            (p + "ffn_norm.weight", 1, E, "ones"),
            (p + "ffn_gate.weight", F, E, "mat"),
            (p + "ffn_up.weight", F, E, "mat"),
            (p + "ffn_down.weight", E, F, "mat"),
        ]
        if arch == "gemma2":
            tensors += [
                (p + "post_attention_norm.weight", 1, E, "ones"),
                (p + "post_ffw_norm.weight", 1, E, "ones"),
            ]
    for name, rows, cols, kind in tensors:
        if kind == "ones":
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), 4 * cols)
        else:
            w.add_tensor_info(name, (rows, cols), np.dtype(np.float16), 2 * rows * cols)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    fout = w.fout[0]
    align = w.data_alignment
    pad = lambda n: fout.write(b"\0" * (-n % align))
    pad(fout.tell())
    rng = np.random.default_rng(SEED)
    buf32 = np.empty(CHUNK_ELEMS, dtype=np.float32)
    buf16 = np.empty(CHUNK_ELEMS, dtype=np.float16)
    total = 0
    for name, rows, cols, kind in tensors:
        if kind == "ones":
            data = np.ones(cols, dtype=np.float32)
            data.tofile(fout)
            nbytes = data.nbytes
        else:
            n = rows * cols
            done = 0
            while done < n:
                k = min(CHUNK_ELEMS, n - done)
                a32, a16 = buf32[:k], buf16[:k]
                rng.standard_normal(out=a32, dtype=np.float32)
                a32 *= STD
                np.copyto(a16, a32, casting="same_kind")
                a16.tofile(fout)
                done += k
            nbytes = 2 * n
        pad(nbytes)
        total += nbytes
    fout.flush()
    os.fsync(fout.fileno())
    w.close()
    os.replace(out + ".tmp", out)
    print(f"{out}: {shape}, vocab {n_vocab}, {total / 1e9:.2f} GB of tensor data")


if __name__ == "__main__":
    main()
