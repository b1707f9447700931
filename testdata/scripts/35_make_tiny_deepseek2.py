#!/usr/bin/env python3
"""Create the seeded random-init tiny DeepSeek-V2 (MLA) model + transformers reference.

Usage: HF_HUB_OFFLINE=1 python 35_make_tiny_deepseek2.py TESTDATA_TINY_DIR [lite|v3]
  Reads the bpe2048 tokenizer from TESTDATA_TINY_DIR/llama/hf/ and writes TESTDATA_TINY_DIR/deepseek2/hf/,
  reference.json and logits.f32le through 21_make_tiny_models.py's `make` (same prompt, same 16
  greedy steps, same reference format). Then `ARCHES=deepseek2 31_convert_families.sh` makes the GGUFs.
  With `lite`: TESTDATA_TINY_DIR/deepseek2-lite/, DeepSeek-V2-Lite's variant; with `v3`:
  TESTDATA_TINY_DIR/deepseek2-v3/, DeepSeek-V3's (below).

DeepSeek-V2 as released, scaled down (transformers' DeepseekV2ForCausalLM):
* multi-head latent attention: 4 heads; queries through a low-rank q_a (24) + RMS norm + q_b
  (DeepSeek-V2's `q_lora_rank`; V2-Lite has none and a plain q_proj, which llama.cpp only accepts
  in a 26/27-layer model); keys and values from a 32-wide latent (`kv_lora_rank`) and an 8-wide
  shared rotary key; per head 16 no-rope + 8 rope key dims and 16 value dims;
* RoPE on interleaved pairs of the rope part, YaRN at the released parameters (factor 40 over an
  original 4096, beta 32/1, mscale = mscale_all_dim = 0.707: softmax scale times mscale²);
* layer 0 a dense SwiGLU FFN (`first_k_dense_replace` 1), layers 1-3 MoE: 8 routed experts of
  width 32, top-2, group-limited (2 groups of 4, the top-2 within the group holding the best expert:
  `group_limited_greedy`), weights NOT renormalized and scaled by 1.5 (`routed_scaling_factor`),
  plus one shared expert.
Shape otherwise 21's COMMON (hidden 64, vocab 2048); 4 layers.

`lite`: DeepSeek-V2-Lite's variant of the same model (seed 1024): queries straight from q_proj
(`q_lora_rank` null), plain top-2 routing over all experts (`greedy`, no groups), scale 1. llama.cpp
runs this variant only at V2-Lite's depth (its loader reads `q_lora_rank` unless the model has
26 or 27 layers), so transformers is its only reference.

`v3`: DeepSeek-V3's router on the same body (transformers' DeepseekV3ForCausalLM, seed 1025; also
Moonlight's): sigmoid scores plus a selection bias (`e_score_correction_bias`, N(0, 0.1) here, used
for the choice only), groups ranked by the sum of their two best (`noaux_tc`; 2 groups of 4, the
best 1 kept), the chosen sigmoid scores renormalized and scaled by 2.5; `scoring_func: sigmoid`
in config.json as the released models have it (the converter's `expert_gating_func`).
"""
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tiny21", os.path.join(HERE, "21_make_tiny_models.py"))
tiny21 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny21)

SEED = 1023
_perturb = tiny21.perturb
groups_pruned = {"n": 0}


def perturb(model, arch, seed):
    _perturb(model, arch, seed)
    tiny21.perturb_routers(model, seed)


def main():
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as md
    root = sys.argv[1]
    tiny21.perturb = perturb
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 0.707, "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}
    common = {k: v for k, v in tiny21.COMMON.items() if k not in ("head_dim", "num_key_value_heads")}
    kw = dict(common, **tiny21.BPE_IDS, num_hidden_layers=4, num_key_value_heads=4,
              max_position_embeddings=163840, tie_word_embeddings=False,
              q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
              intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
              n_shared_experts=1, first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=2,
              topk_group=1, routed_scaling_factor=1.5, norm_topk_prob=False, rope_parameters=rope)

    # Count how often the group limit changes the choice in the reference runs (the check that
    # it is exercised): the plain top-2 of all experts would pick an expert of a pruned group.
    orig = md.DeepseekV2TopkRouter.forward

    def forward(self, hidden_states):
        logits, w, idx = orig(self, hidden_states)
        plain = torch.topk(logits.softmax(-1), k=self.top_k, dim=-1).indices.sort(-1).values
        groups_pruned["n"] += int((plain != idx.sort(-1).values).any(-1).sum())
        return logits, w, idx

    md.DeepseekV2TopkRouter.forward = forward
    variant = sys.argv[2] if len(sys.argv) > 2 else ""
    lite = variant == "lite"
    name, seed, cfg_cls, model_cls = "deepseek2", SEED, DeepseekV2Config, DeepseekV2ForCausalLM
    if lite:
        name, seed = "deepseek2-lite", SEED + 1
        kw.update(q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0)
    if variant == "v3":
        from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
        name, seed, cfg_cls, model_cls = "deepseek2-v3", SEED + 2, DeepseekV3Config, DeepseekV3ForCausalLM
        kw.update(topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=2.5, scoring_func="sigmoid")
        def perturb_v3(model, arch, seed):
            _perturb(model, arch, seed)
            tiny21.perturb_routers(model, seed, selection_bias=True)

        tiny21.perturb = perturb_v3
    tiny21.make_with_bpe2048(name, (cfg_cls, model_cls, kw, "bpe2048", torch.bfloat16, seed), root)
    print("rows whose experts the group limit changed in the reference runs:", groups_pruned["n"])
    assert variant or groups_pruned["n"] > 0, "the group limit is not exercised"


if __name__ == "__main__":
    main()
