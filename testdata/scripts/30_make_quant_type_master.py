#!/usr/bin/env python3
"""Write the F32 master GGUF that 30_make_quant_type_fixtures.sh quantizes into every type.

Usage: python3 30_make_quant_type_master.py TINY_LLAMA_GGUF OUT.gguf

A tiny random llama whose every matmul dimension is a multiple of 256, so that the
256-element super-block types (Q2_K..Q6_K, IQ4_XS) quantize every matrix instead of
llama-quantize falling back to a 32-element type:

  hidden 256, 1 layer, n_ff 512, 4 heads / 2 kv heads (head_dim 64), vocab 2048,
  tied embeddings (no output.weight: the head is token_embd, as in the qwen2/qwen3 fixtures).

One layer and a tied head keep the 16 quantized files at 19 MB together (2 layers with an
untied head would be about 28 MB: the 2048 x 256 embedding is half of every file).

The tokenizer and every other metadata key are copied from TINY_LLAMA_GGUF
(testdata/tiny/llama/llama-f16.gguf: the 2048-token BPE of the tiny fixtures); only the
shape keys, general.name and general.file_type (0 = all F32) differ. Weights: numpy
PCG64, seed 3001, every matrix N(0, 0.1) (the initializer_range of 21_make_tiny_models.py),
RMSNorm weights 1 + N(0, 0.1). The file is the same bit for bit on every run (gguf 0.19.0,
numpy 2.4.6).

Why N(0, 0.1) for the embedding too: the greedy text is then sensitive to the weights but
not to rounding: 16 greedy tokens ("The quick brown fox") are the same from the F32, F16,
BF16 and Q8_0 files (weight error <= 0.54 % rms), Q6_K's (1.8 %) differ in the last few
and Q4_0's (8.6 %) from the first, so a decoder that gets a scale or a nibble wrong changes
the text. With an N(0, 1) embedding every file down to Q4_0 repeated one token.
"""
import sys

import gguf
import numpy as np

HIDDEN, LAYERS, N_FF, HEADS, KV, VOCAB = 256, 1, 512, 4, 2, 2048
HEAD_DIM = HIDDEN // HEADS
SEED = 3001

# Keys written here (not copied) or written by GGUFWriter itself.
OWN = {
    "general.architecture", "general.name", "general.size_label", "general.file_type",
    "general.quantization_version",
    "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
    "llama.attention.head_count", "llama.attention.head_count_kv", "llama.attention.key_length",
    "llama.attention.value_length", "llama.rope.dimension_count", "llama.vocab_size",
}


def main(src, out):
    r = gguf.GGUFReader(src)
    assert r.fields["general.architecture"].contents() == "llama"
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-random-llama-256")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in OWN:
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub)
    assert len(r.fields["tokenizer.ggml.tokens"].contents()) == VOCAB

    rng = np.random.Generator(np.random.PCG64(SEED))

    def mat(rows, cols):
        return (0.1 * rng.standard_normal((rows, cols))).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)

    # numpy shape (rows, cols) = GGUF (ne1, ne0): cols is the dot-product length.
    w.add_tensor("token_embd.weight", mat(VOCAB, HIDDEN))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm())
        w.add_tensor(p + "attn_q.weight", mat(HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_k.weight", mat(KV * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_v.weight", mat(KV * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_output.weight", mat(HIDDEN, HEADS * HEAD_DIM))
        w.add_tensor(p + "ffn_norm.weight", norm())
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, HIDDEN))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, HIDDEN))
        w.add_tensor(p + "ffn_down.weight", mat(HIDDEN, N_FF))
    w.add_tensor("output_norm.weight", norm())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
