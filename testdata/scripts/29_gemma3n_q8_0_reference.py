#!/usr/bin/env python3
"""Weights-only Q8_0 reference for the tiny Gemma 3n (as 23_q8_0_reference.py does for the
other arches): the f32 HF model with every tensor that llama.cpp's converter stores as Q8_0 in
gemma3n-q8_0.gguf (the >= 2-D weights whose rows are a multiple of 32 wide; the 4x4 / 4x16
AltUp coefficients and the 8-wide laurel_r stay F32/F16 there) replaced by its Q8_0
quantize->dequantize image (gguf-py's reference quantizer), computed in float32. This isolates
weight-quantization error from activation quantization (the int8 kernels also quantize
activations).

Usage: HF_HUB_OFFLINE=1 python 29_gemma3n_q8_0_reference.py TESTDATA_TINY_DIR
Writes TESTDATA_TINY_DIR/gemma3n/reference_q8_0.json (last logits, argmax per position,
greedy ids: the fields of reference.json that the tests read).
"""
import json
import os
import sys

import gguf
import numpy as np
import torch
from gguf.quants import dequantize, quantize
from transformers import AutoModelForCausalLM

d = os.path.join(sys.argv[1], "gemma3n")
ref = json.load(open(os.path.join(d, "reference.json")))
m = AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"), dtype=torch.float32,
                                         attn_implementation="eager").eval()
# Which tensors the GGUF holds as Q8_0 (checked, not assumed): by shape rule, then counted.
g = gguf.GGUFReader(os.path.join(d, "gemma3n-q8_0.gguf"))
n_q8 = sum(1 for t in g.tensors if t.tensor_type == gguf.GGMLQuantizationType.Q8_0)
quantized = []
with torch.no_grad():
    for name, p in m.named_parameters():
        if p.dim() >= 2 and p.shape[-1] % 32 == 0:
            a = p.detach().float().numpy().astype(np.float32)
            q = quantize(a, gguf.GGMLQuantizationType.Q8_0)
            p.copy_(torch.from_numpy(dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape)))
            quantized.append(name)
# lm_head is tied (counted once); the 3 altup projections of each kind are 1 GGUF tensor.
stacked = sum(1 for n in quantized if "altup_projections" in n or "altup_unembed_projections" in n)
assert len(quantized) - stacked + 2 == n_q8, (len(quantized), stacked, n_q8)
ids = ref["prompt_ids"]
with torch.no_grad():
    logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    seq = list(ids)
    greedy = []
    for _ in range(len(ref["greedy_new_ids"])):
        nxt = int(m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
        greedy.append(nxt)
        seq.append(nxt)
out = {
    "note": "f32 compute with Q8_0 quantize->dequantize weights (gguf-py reference quantizer)",
    "quantized_tensors": quantized,
    "prompt_ids": ids,
    "argmax_per_position": logits.argmax(-1).tolist(),
    "last_logits": logits[-1].tolist(),
    "greedy_new_ids": greedy,
}
json.dump(out, open(os.path.join(d, "reference_q8_0.json"), "w"), indent=1)
last = np.array(out["last_logits"])
f32 = np.array(ref["last_logits"])
print("quantized", len(quantized), "gguf q8_0 tensors", n_q8,
      "rel L2 vs f32 reference %.5f" % (np.linalg.norm(last - f32) / np.linalg.norm(f32)))
