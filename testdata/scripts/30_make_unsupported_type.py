#!/usr/bin/env python3
"""A tiny llama GGUF whose blk.0.ffn_down.weight has a ggml type gpack cannot
decode (default IQ2_XXS), for the CLI test that `gpack convert` and `gpack run`
refuse it by name with exit code 1 (issues 13 and 15).

Usage (gguf==0.19.0, numpy; see requirements-lock.txt):

    python testdata/scripts/30_make_unsupported_type.py [TYPE] [OUT]

defaults: TYPE = IQ2_XXS, OUT = testdata/unsupported/llama-iq2_xxs.gguf.

Made from testdata/tiny/llama/llama-q8_0.gguf: the same metadata (tokenizer
included) and attention/embedding tensors, one layer, no output.weight (tied
to token_embd), and feed_forward_length
256 so that ffn_down's rows (ne0 = 256) hold whole 256-element super-blocks.
ffn_gate/ffn_up are seeded random Q8_0; ffn_down's block bytes are seeded
random bytes: the file is only meant to be refused, so no value in it needs to
be meaningful. Any other TYPE (e.g. Q8_0, as a control) writes random blocks
of that type the same way, with a valid f16 scale where the type has one at
byte 0 so that the control file decodes to finite values.
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SRC = os.path.join(ROOT, "testdata", "tiny", "llama", "llama-q8_0.gguf")
N_FF = 256


def main():
    qtype = T[sys.argv[1]] if len(sys.argv) > 1 else T.IQ2_XXS
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        ROOT, "testdata", "unsupported", f"llama-{qtype.name.lower()}.gguf")
    rng = np.random.default_rng(30)
    r = gguf.GGUFReader(SRC)
    w = gguf.GGUFWriter(out, "llama")
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if name == "llama.block_count":
            val = 1
        elif name == "llama.feed_forward_length":
            val = N_FF
        elif name == "general.name":
            val = f"tiny-llama-{qtype.name.lower()}-ffn-down"
        w.add_key_value(name, val, vtype, sub_type=sub)
    n_embd = 64
    for t in r.tensors:
        if t.name.startswith("blk.") and not t.name.startswith("blk.0."):
            continue
        if ".ffn_" in t.name and not t.name.endswith("_norm.weight"):
            continue
        if t.name == "output.weight":  # tied to token_embd, as in SmolLM2
            continue
        w.add_tensor(t.name, np.asarray(t.data).copy(), raw_dtype=t.tensor_type)
    for name in ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"):
        x = (rng.standard_normal((N_FF, n_embd)) * 0.1).astype(np.float32)
        w.add_tensor(name, quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_embd * N_FF // bs, ts), dtype=np.uint16).astype(np.uint8)
    if qtype in (T.Q8_0, T.Q4_0, T.IQ4_NL, T.IQ4_XS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S):
        blocks[:, 0:2] = np.array([0x2000], dtype="<u2").view(np.uint8)  # d = 2^-7
    w.add_tensor("blk.0.ffn_down.weight", blocks.reshape(n_embd, -1), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
