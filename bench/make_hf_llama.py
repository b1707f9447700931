#!/usr/bin/env python3
"""Write a Hugging Face llama directory (config.json, one bf16 model.safetensors, a tokenizer) with
random weights at a real model's shape, for bench/quantize.sh (HF bf16 -> Q4_K_M). numpy only.

Usage: make_hf_llama.py SHAPE OUT_DIR TOKENIZER_DIR
  SHAPE  smollm2 (SmolLM2-135M: 576 x 30 layers, ff 1536, 9/3 heads, vocab 49152, tied)
         1b      (Llama-3.2-1B body: 2048 x 16, ff 8192, 32/8 heads, vocab 128256, tied)
  TOKENIZER_DIR  a directory with tokenizer.json / tokenizer_config.json (any BPE tokenizer; its
         vocabulary may be smaller than the model's, convert_hf_to_gguf.py pads it).
Weights: bf16 with random sign and mantissa, exponents giving |w| in [2^-8, 2^-4) (uniform bits:
cheap to make; the quantizers' work does not depend on the distribution). Seed 45.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

SHAPES = {  # hidden, layers, ff, heads, kv_heads, vocab
    "smollm2": (576, 30, 1536, 9, 3, 49152),
    "1b": (2048, 16, 8192, 32, 8, 128256),
}


def tensors(h, layers, ff, heads, kv, vocab):
    hd = h // heads
    t = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(layers):
        p = f"model.layers.{i}."
        t += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (heads * hd, h)),
            (p + "self_attn.k_proj.weight", (kv * hd, h)),
            (p + "self_attn.v_proj.weight", (kv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (ff, h)),
            (p + "mlp.up_proj.weight", (ff, h)),
            (p + "mlp.down_proj.weight", (h, ff)),
        ]
    t.append(("model.norm.weight", (h,)))
    return t


def main(shape, out, tok):
    h, layers, ff, heads, kv, vocab = SHAPES[shape]
    os.makedirs(out, exist_ok=True)
    ts = tensors(h, layers, ff, heads, kv, vocab)
    header, off = {}, 0
    for name, s in ts:
        n = int(np.prod(s)) * 2
        header[name] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.Generator(np.random.PCG64(45))
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, s in ts:
            n = int(np.prod(s))
            if len(s) == 1:
                f.write(np.full(n, 0x3F80, np.uint16).tobytes())  # 1.0
                continue
            for start in range(0, n, 1 << 24):
                m = min(1 << 24, n - start)
                bits = rng.integers(0, 1 << 16, m, dtype=np.uint32)
                sign = (bits & 1) << 15
                exp = (0x77 + ((bits >> 1) & 3)) << 7
                mant = (bits >> 3) & 0x7F
                f.write((sign | exp | mant).astype("<u2").tobytes())
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "num_hidden_layers": layers, "intermediate_size": ff, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": h // heads, "vocab_size": vocab,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(tok, name), os.path.join(out, name))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    main(*sys.argv[1:])
