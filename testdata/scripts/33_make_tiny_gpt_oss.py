#!/usr/bin/env python3
"""Create the seeded random-init tiny gpt-oss model + transformers reference.

Usage: HF_HUB_OFFLINE=1 python 33_make_tiny_gpt_oss.py TESTDATA_TINY_DIR
  Reads the bpe2048 tokenizer from TESTDATA_TINY_DIR/llama/hf/ and writes TESTDATA_TINY_DIR/gpt-oss/hf/,
  reference.json and logits.f32le through 21_make_tiny_models.py's `make` (same prompt, same 16
  greedy steps, same reference format). Then `ARCHES=gpt-oss 31_convert_families.sh` makes the GGUFs.

gpt-oss as released, scaled down: 4 layers (sliding, full, sliding, full: transformers' default
layer_types), sliding window 8, attention biases and per-head sinks, 4 experts with top-2 routing
(router bias; softmax over the top-k logits), expert gate/up/down biases, the clamped SwiGLU at its
released alpha 1.702 / limit 7 (which llama.cpp hard-codes), YaRN at the released parameters
(factor 32 over an original 4096, beta 32/1, truncate false, base 150000).
Shape otherwise 21's COMMON (hidden 64, 4 heads of 16, 2 kv heads, expert width 128, vocab 2048).

Non-trivial values where the released initialisation is zero or too small to matter: sinks
N(0, 1) (so a missing sink is visible), expert biases N(0, 0.1), and the experts' gate_up
weights N(0, 0.5) so that some gate/up values pass the clamp limit of 7 (checked below).
"""
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tiny21", os.path.join(HERE, "21_make_tiny_models.py"))
tiny21 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny21)

SEED = 1017
_perturb = tiny21.perturb
clamped = {"n": 0}


def perturb(model, arch, seed):
    _perturb(model, arch, seed)
    g = torch.Generator().manual_seed(seed + 11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("self_attn.sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("_proj_bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("experts.gate_up_proj"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))


def count_clamped(module, inputs, output):
    gate_up = inputs[0]
    clamped["n"] += int((gate_up[..., ::2] > 7).sum() + (gate_up[..., 1::2].abs() > 7).sum())


def main():
    from transformers import GptOssConfig, GptOssForCausalLM
    from transformers.models.gpt_oss import modeling_gpt_oss as mg
    root = sys.argv[1]
    tiny21.perturb = perturb
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 4096}
    kw = dict({k: v for k, v in tiny21.COMMON.items()}, **tiny21.BPE_IDS, num_hidden_layers=4,
              max_position_embeddings=131072, tie_word_embeddings=False, sliding_window=8,
              num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5, rope_parameters=rope)
    # Count the clamp's work in the reference run (the check that it is exercised).
    orig = mg.GptOssExperts._apply_gate

    def apply_gate(self, gate_up):
        count_clamped(None, (gate_up,), None)
        return orig(self, gate_up)

    mg.GptOssExperts._apply_gate = apply_gate
    tiny21.make_with_bpe2048("gpt-oss", (GptOssConfig, GptOssForCausalLM, kw, "bpe2048", torch.bfloat16, SEED), root)
    print("gate/up values past the clamp limit in the reference runs:", clamped["n"])
    assert clamped["n"] > 0, "the clamp is not exercised"


if __name__ == "__main__":
    main()
