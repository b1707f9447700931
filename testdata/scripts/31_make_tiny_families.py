#!/usr/bin/env python3
"""Create the seeded random-init tiny SmolLM3, Granite, Gemma 2, OLMo 2 and Phi-3 models +
transformers references.

Usage: HF_HUB_OFFLINE=1 python 31_make_tiny_families.py TESTDATA_TINY_DIR [arch ...]
  Reads the bpe2048 / spm2048 tokenizer files from TESTDATA_TINY_DIR/{llama,gemma3}/hf/ and writes, per arch,
  TESTDATA_TINY_DIR/<arch>/hf/, reference.json and logits.f32le through 21_make_tiny_models.py's
  `make` (same prompt, same 16 greedy steps, same reference format). Then
  31_convert_families.sh makes the GGUFs with llama.cpp's converter.

SmolLM3 and Granite are llama bodies that llama.cpp converts with its LlamaModel (q/k permuted):
- smollm3: 4 layers, so that layer 3 is a NoPE layer (transformers `no_rope_layer_interval` 4,
  llama.cpp's hard-coded `n_no_rope_layer_step = 4`);
- granite: the four multipliers at values far from 1 (embedding 12, attention 1/8 instead of
  1/sqrt(16) = 1/4, residual 0.22, logits divided by 8), so a missing one is visible.
- gemma2: 4 layers (sliding, full, sliding, full), sliding window 8, attention-logit soft-cap 50
  and final soft-cap 30 at the released values, query_pre_attn_scalar = head_dim (the 2B/9B rule
  llama.cpp applies), the spm2048 tokenizer of the gemma3 fixture.
- olmo2: post-norm blocks (no input norms), q/k RMS norms over all heads (q: 64, k: 32 wide).
- phi3: fused qkv and gate_up projections, partial rotary (0.75: 12 of 16 dims, as Phi-4-mini),
  LongRoPE (max 4096 over an original 1024: long and short factors, attention factor
  sqrt(1 + ln 4 / ln 1024)); the 32-token reference runs on the short factors (transformers picks
  them for sequences up to the original length), the bpe2048 tokenizer declared as GPT2Tokenizer (Phi-4-mini's class).
Shape otherwise 21's COMMON (hidden 64, 4 heads of 16, 2 kv heads, intermediate 128, vocab 2048).
"""
import importlib.util
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tiny21", os.path.join(HERE, "21_make_tiny_models.py"))
tiny21 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny21)


def arch_specs():
    from transformers import (Gemma2Config, Gemma2ForCausalLM, GraniteConfig, GraniteForCausalLM, Olmo2Config,
                              Olmo2ForCausalLM, Phi3Config, Phi3ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)
    common = tiny21.COMMON
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "smollm3": (SmolLM3Config, SmolLM3ForCausalLM,
                    dict(common, **tiny21.BPE_IDS, num_hidden_layers=4, no_rope_layer_interval=4,
                         tie_word_embeddings=True, rope_parameters=rope),
                    "bpe2048", torch.bfloat16, 1008),
        "granite": (GraniteConfig, GraniteForCausalLM,
                    dict({k: v for k, v in common.items() if k != "head_dim"}, **tiny21.BPE_IDS,
                         tie_word_embeddings=False, embedding_multiplier=12.0, attention_multiplier=0.125,
                         residual_multiplier=0.22, logits_scaling=8.0, rope_parameters=rope),
                    "bpe2048", torch.bfloat16, 1013),
        "gemma2": (Gemma2Config, Gemma2ForCausalLM,
                   dict(common, **tiny21.SPM_IDS, num_hidden_layers=4, tie_word_embeddings=True,
                        query_pre_attn_scalar=tiny21.HEAD_DIM, sliding_window=8,
                        layer_types=["sliding_attention", "full_attention"] * 2,
                        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                        hidden_activation="gelu_pytorch_tanh", rope_parameters=rope),
                   "spm2048", torch.bfloat16, 1014),
        "olmo2": (Olmo2Config, Olmo2ForCausalLM,
                  dict({k: v for k, v in common.items() if k != "head_dim"}, **tiny21.BPE_IDS,
                       tie_word_embeddings=False, rope_parameters=rope),
                  "bpe2048", torch.bfloat16, 1015),
        "phi3": (Phi3Config, Phi3ForCausalLM,
                 dict({k: v for k, v in common.items() if k != "head_dim"}, **tiny21.BPE_IDS,
                      tie_word_embeddings=False, max_position_embeddings=4096,
                      original_max_position_embeddings=1024,
                      rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                       "partial_rotary_factor": 0.75,
                                       "original_max_position_embeddings": 1024,
                                       "short_factor": [1.0, 1.1, 1.3, 1.7, 2.3, 3.1],
                                       "long_factor": [1.0, 1.5, 2.5, 4.0, 7.0, 11.0]}),
                 "bpe2048-gpt2", torch.bfloat16, 1016),
    }


def main():
    root = sys.argv[1]
    want = sys.argv[2:]
    with tempfile.TemporaryDirectory() as tok:
        for name, src in (("bpe2048", "llama"), ("spm2048", "gemma3"), ("bpe2048-gpt2", "llama")):
            os.makedirs(os.path.join(tok, name))
            for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "chat_template.jinja"):
                if os.path.exists(os.path.join(root, src, "hf", f)):
                    shutil.copy(os.path.join(root, src, "hf", f), os.path.join(tok, name))
        # Phi-3's converter reads a SentencePiece model unless the tokenizer class is GPT-2's
        # (Phi-4-mini): the bpe2048 tokenizer, declared as GPT-2's.
        cfg_p = os.path.join(tok, "bpe2048-gpt2", "tokenizer_config.json")
        with open(cfg_p) as f:
            cfg = json.load(f)
        cfg["tokenizer_class"] = "GPT2Tokenizer"
        with open(cfg_p, "w") as f:
            json.dump(cfg, f, indent=2)
        for arch, s in arch_specs().items():
            if not want or arch in want:
                tiny21.make(arch, s, tok, root)


if __name__ == "__main__":
    main()
