#!/usr/bin/env python3
"""LongRoPE's long factors: a transformers reference for the tiny Phi-3 past its original context.

Usage: HF_HUB_OFFLINE=1 python 32_phi3_long_reference.py TESTDATA_TINY_DIR
Writes TESTDATA_TINY_DIR/phi3/reference_long.json: a 1100-token prompt (ids from
random.Random(20261203) over the vocabulary) run in float32, eager attention, no cache; transformers
uses the long factors for a sequence longer than original_max_position_embeddings (1024), as
llama.cpp does for a context longer than that. Stored: the prompt, the argmax of the last 16
positions and the last position's logits.
"""
import json
import os
import random
import sys

import torch
from transformers import AutoModelForCausalLM

root = sys.argv[1]
d = os.path.join(root, "phi3")
m = AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"), dtype=torch.float32,
                                         attn_implementation="eager").eval()
rng = random.Random(20261203)
ids = [rng.randrange(3, m.config.vocab_size) for _ in range(1100)]
with torch.no_grad():
    logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
assert len(ids) > m.config.rope_parameters["original_max_position_embeddings"]
out = {
    "prompt_ids": ids,
    "argmax_last16": logits[-16:].argmax(-1).tolist(),
    "last_logits": logits[-1].tolist(),
    "compute": "transformers %s, torch %s, float32, eager, use_cache=False" % (
        __import__("transformers").__version__, torch.__version__),
}
with open(os.path.join(d, "reference_long.json"), "w") as f:
    json.dump(out, f)
print("argmax_last16", out["argmax_last16"])
