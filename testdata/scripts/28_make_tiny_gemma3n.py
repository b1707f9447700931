#!/usr/bin/env python3
"""Create the seeded random-init tiny Gemma 3n text model + transformers reference outputs.

Usage: HF_HUB_OFFLINE=1 python 28_make_tiny_gemma3n.py TESTDATA_TINY_DIR
  Reads the spm2048 tokenizer files from TESTDATA_TINY_DIR/gemma3/hf/ and writes
  TESTDATA_TINY_DIR/gemma3n/hf/ (config.json, model.safetensors, generation_config.json,
  tokenizer files), TESTDATA_TINY_DIR/gemma3n/reference.json and logits.f32le
  (all-position logits, [16, 2048] little-endian f32), in the format of
  21_make_tiny_models.py (same prompt, same 16 greedy steps).
  Then 22_convert_all.sh (every TINY_DIR/*/hf) makes the GGUFs with llama.cpp's converter.

Gemma 3n is the one family with a per-layer embedding (PLE) table: every token reads one
row of `embed_tokens_per_layer` ([vocab_per_layer, n_layer * hidden_per_layer]). The model
exercises everything of the text graph: AltUp (4 streams, predict/correct, router), Laurel,
per-layer inputs, q/k/v norms without the 1/sqrt(head_dim) scale, sliding + global layers,
KV sharing (the last 2 layers reuse the K/V of the last non-shared layer of their type;
the layer pattern ends the non-shared part with [sliding, full], the case llama.cpp's
`n_layer_kv_from_start - (swa ? 2 : 1)` rule covers), gaussian top-k activation sparsity
(first 2 layers), final logit soft-capping.

Shape: hidden 64, 6 layers ([sliding, full] x 3), 4 heads (head_dim 16), 2 kv heads,
intermediate 128, vocab 2048 = vocab_per_layer (so llama.cpp's converter pads nothing), hidden
per layer 32, laurel rank 8, sliding window 8. Saved as bfloat16 (the PLE table is 2048 x 192).
llama.cpp converts this model but its runtime cannot load it: it hard-codes the real sizes
(n_embd_altup = 256, laurel rank 64, n_layer_kv_from_start = 20), so the reference here is
transformers only. All weights N(0, 0.1); norm weights 1 + N(0, 0.1)
(Gemma3nRMSNorm computes x * w); AltUp's correct_output_scale (zero at init, which would
silence the per-layer input path) is 1 + N(0, 0.1).
Reference: model reloaded from the saved files in float32, eager attention, no KV cache.
"""
import json
import os
import shutil
import sys

import torch

PROMPT_TEXT = ("The quick brown fox jumps over the lazy dog.\n"
               "def main():\n    return 42  # answer\n")
N_PROMPT, N_NEW = 16, 16
SEED = 1007


def main():
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma3nForCausalLM, Gemma3nTextConfig,
                              GenerationConfig)
    root = sys.argv[1]
    out = os.path.join(root, "gemma3n")
    hf = os.path.join(out, "hf")
    if os.path.isdir(hf):
        shutil.rmtree(hf)
    os.makedirs(hf)
    torch.manual_seed(SEED)
    types = ["sliding_attention", "full_attention"] * 3
    cfg = Gemma3nTextConfig(
        vocab_size=2048, vocab_size_per_layer_input=2048, hidden_size=64, hidden_size_per_layer_input=32,
        intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=2048, initializer_range=0.1, rms_norm_eps=1e-6, sliding_window=8,
        layer_types=types, num_kv_shared_layers=2, laurel_rank=8, altup_num_inputs=4, altup_active_idx=0,
        activation_sparsity_pattern=[0.95] * 2 + [0.0] * 4, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
        pad_token_id=0,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    model = Gemma3nForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("correct_output_scale"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=2, eos_token_id=1, pad_token_id=0, do_sample=False)
    model.save_pretrained(hf, safe_serialization=True)
    tok_src = os.path.join(root, "gemma3", "hf")
    for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(tok_src, f)):
            shutil.copy(os.path.join(tok_src, f), hf)
    for f in os.listdir(hf):
        os.chmod(os.path.join(hf, f), 0o644)

    # ---- reference outputs from the saved files, float32, eager, no cache
    m = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(hf)
    ids = tok(PROMPT_TEXT, add_special_tokens=True).input_ids[:N_PROMPT]
    assert len(ids) == N_PROMPT, ids
    x = torch.tensor([ids])
    with torch.no_grad():
        o = m(input_ids=x, use_cache=False)
    logits = o.logits[0].float()
    last = logits[-1]
    top5 = torch.topk(logits, 5, dim=-1)
    seq = list(ids)
    steps = []
    with torch.no_grad():
        for _ in range(N_NEW):
            lg = m(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            t2 = torch.topk(lg, 2)
            nxt = int(t2.indices[0])
            steps.append({"id": nxt, "logit": float(t2.values[0]), "margin_to_2nd": float(t2.values[0] - t2.values[1])})
            seq.append(nxt)
        from transformers import DynamicCache
        cache = DynamicCache(config=m.config)
        out_c = m(input_ids=x, past_key_values=cache, use_cache=True)
        gen = []
        for _ in range(N_NEW):
            nxt = int(out_c.logits[0, -1].argmax())
            gen.append(nxt)
            out_c = m(input_ids=torch.tensor([[nxt]]), past_key_values=out_c.past_key_values, use_cache=True)
    greedy = [s["id"] for s in steps]
    with open(os.path.join(out, "logits.f32le"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    ref = {
        "arch": "gemma3n",
        "hf_architecture": m.config.architectures[0],
        "saved_dtype": "bfloat16",
        "seed": SEED,
        "n_params": sum(p.numel() for p in m.parameters()),
        "tokenizer": "spm2048",
        "prompt_text": PROMPT_TEXT,
        "prompt_ids": ids,
        "prompt_tokens": tok.convert_ids_to_tokens(ids),
        "compute": "transformers %s, torch %s, float32, attn_implementation=eager, use_cache=False" % (
            __import__("transformers").__version__, torch.__version__),
        "argmax_per_position": logits.argmax(-1).tolist(),
        "top5_per_position": {"ids": top5.indices.tolist(), "logits": top5.values.tolist()},
        "last_logits": last.tolist(),
        "all_logits_file": "logits.f32le (shape [%d, %d], little-endian float32, row = position)" % tuple(logits.shape),
        "greedy_new_ids": greedy,
        "greedy_steps": steps,
        "greedy_text": tok.decode(greedy),
        "kv_cache_incremental_new_ids": gen,
        "kv_cache_matches_full_recompute": gen == greedy,
        "greedy_note": "greedy argmax, %d new tokens, full-sequence recompute each step, does NOT stop at EOS" % N_NEW,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print("gemma3n params", ref["n_params"], "argmax", ref["argmax_per_position"], "greedy", greedy,
          "kv==full", gen == greedy, "min margin %.4f" % min(s["margin_to_2nd"] for s in steps), flush=True)


if __name__ == "__main__":
    main()

# GGUFs (llama.cpp's converter, same wrapper as 22_convert_all.sh), from the repository root:
#   for ot in f16 q8_0; do HF_HUB_OFFLINE=1 python testdata/scripts/22_convert_wrapper.py LLAMA_CPP_DIR \
#     testdata/tiny/gemma3n/hf --outtype $ot --model-name tiny-random-gemma3n \
#     --outfile testdata/tiny/gemma3n/gemma3n-$ot.gguf; done
