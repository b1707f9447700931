#!/usr/bin/env python3
"""The tiny gpt-oss model as OpenAI ships gpt-oss: routed experts in MXFP4 (`*_blocks` / `*_scales`
uint8 tensors, `quantization_config.quant_method = "mxfp4"`), everything else as in ../hf.

Usage: HF_HUB_OFFLINE=1 python 34_make_tiny_gpt_oss_mxfp4.py TESTDATA_TINY_DIR
  Reads TESTDATA_TINY_DIR/gpt-oss/hf (33_make_tiny_gpt_oss.py), writes TESTDATA_TINY_DIR/gpt-oss/hf-mxfp4/
  and TESTDATA_TINY_DIR/gpt-oss/reference_mxfp4.json: transformers' logits for the fixture prompt and 16
  greedy tokens from hf-mxfp4 loaded with Mxfp4Config(dequantize=True) (its CPU path), float32, eager.
  Then `ARCHES=gpt-oss-mxfp4 31_convert_families.sh` makes gpt-oss-mxfp4.gguf with llama.cpp's converter
  (which copies the MXFP4 bytes into ggml's block layout, GptOssModel.repack_mxfp4).

Quantizer (ours; any valid MXFP4 bytes do, since every reader decodes the same bytes): per 32 input
values of an output row, the E8M0 scale 2^(floor(log2(max|x|)) - 2) (so the largest value lands in
e2m1's [4, 8) range), each value rounded to the nearest e2m1 value {0, .5, 1, 1.5, 2, 3, 4, 6} times
the scale (ties to the lower magnitude); OpenAI's layout: blocks [E, out, in/32, 16], byte j of a block
holding value 2j in its low nibble and 2j+1 in its high nibble, code = magnitude index + 8 if negative.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

MAGS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def quantize(w):
    """w: [rows, cols] float -> (blocks uint8 [rows, cols/32, 16], scales uint8 [rows, cols/32])."""
    rows, cols = w.shape
    g = w.astype(np.float64).reshape(rows, cols // 32, 32)
    amax = np.abs(g).max(-1)
    e = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127)
    code_e = np.clip(e + 127, 0, 254).astype(np.uint8)
    scale = np.ldexp(1.0, code_e.astype(np.int32) - 127)[..., None]
    mag = np.abs(g) / scale
    idx = np.abs(mag[..., None] - MAGS).argmin(-1)  # first (lower) on ties
    codes = (idx + np.where(g < 0, 8, 0)).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks, code_e


def main():
    root = sys.argv[1]
    src = os.path.join(root, "gpt-oss", "hf")
    out = os.path.join(root, "gpt-oss", "hf-mxfp4")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    t = load_file(os.path.join(src, "model.safetensors"))
    res = {}
    for name, v in t.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            w = v.float().numpy()  # [E, in, out]
            bl, sc = zip(*(quantize(w[e].T) for e in range(w.shape[0])))
            res[name + "_blocks"] = torch.from_numpy(np.ascontiguousarray(np.stack(bl)))
            res[name + "_scales"] = torch.from_numpy(np.ascontiguousarray(np.stack(sc)))
        else:
            res[name] = v
    save_file(res, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    for f in os.listdir(src):
        if f != "model.safetensors":
            shutil.copy(os.path.join(src, f), out)
    cfg_p = os.path.join(out, "config.json")
    with open(cfg_p) as f:
        cfg = json.load(f)
    # As the released gpt-oss checkpoints declare it.
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(cfg_p, "w") as f:
        json.dump(cfg, f, indent=2)

    from transformers import AutoModelForCausalLM, Mxfp4Config
    ref = json.load(open(os.path.join(root, "gpt-oss", "reference.json")))
    m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                             quantization_config=Mxfp4Config(dequantize=True)).eval()
    ids = ref["prompt_ids"]
    with torch.no_grad():
        logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
        seq = list(ids)
        greedy = []
        for _ in range(len(ref["greedy_new_ids"])):
            nxt = int(m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
    last = logits[-1]
    f32 = np.array(ref["last_logits"])
    doc = {
        "what": "transformers %s, torch %s: hf-mxfp4 with Mxfp4Config(dequantize=True), float32, eager, no cache" % (
            __import__("transformers").__version__, torch.__version__),
        "prompt_ids": ids,
        "argmax_per_position": logits.argmax(-1).tolist(),
        "last_logits": last.tolist(),
        "greedy_new_ids": greedy,
        "vs_unquantized": {"last_logits_rel_l2": float(np.linalg.norm(last.numpy() - f32) / np.linalg.norm(f32))},
    }
    with open(os.path.join(root, "gpt-oss", "reference_mxfp4.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("mxfp4: greedy", greedy, "rel L2 to the unquantized model", doc["vs_unquantized"])


if __name__ == "__main__":
    main()
