#!/usr/bin/env python3
"""Create the seeded random-init tiny GLM-4.7-Flash model with one multi-token-prediction (MTP,
"nextn") block + transformers references for the trunk and for the MTP block.

Usage: HF_HUB_OFFLINE=1 python 36_make_tiny_glm4_mtp.py TESTDATA_TINY_DIR
  Reads the bpe2048 tokenizer from TESTDATA_TINY_DIR/llama/hf/ and writes TESTDATA_TINY_DIR/glm4-mtp/:
  hf/, reference.json and logits.f32le through 21_make_tiny_models.py's `make` (same prompt, same
  16 greedy steps, same reference format: the trunk), then appends the MTP block to
  hf/model.safetensors and writes mtp_reference.json + mtp_logits.f32le. Then
  `ARCHES=glm4-mtp 31_convert_families.sh` makes the GGUFs (llama.cpp arch `deepseek2`, 5 blocks,
  `deepseek2.nextn_predict_layers` 1, the MTP block as blk.4 with its `blk.4.nextn.*` tensors).

GLM-4.7-Flash as released (transformers' Glm4MoeLiteForCausalLM: DeepSeek-V3's body), scaled down:
* multi-head latent attention as the deepseek2 fixtures (35_make_tiny_deepseek2.py): 4 heads,
  queries through a rank-24 q_a + RMS norm + q_b, keys/values from a 32-wide latent and an 8-wide
  shared rotary key, per head 16 no-rope + 8 rope key dims and 16 value dims, RoPE on interleaved
  pairs, YaRN at DeepSeek's parameters (factor 40 over 4096, beta 32/1, mscale = mscale_all_dim =
  0.707; GLM-4.7-Flash itself has plain RoPE, theta 1e6);
* layer 0 a dense SwiGLU FFN (`mlp_layer_types`; `first_k_dense_replace` 1 in config.json for
  llama.cpp's converter), layers 1-3 MoE: 8 routed experts of width 32, top-2, sigmoid scores plus a
  selection bias (`e_score_correction_bias`, N(0, 0.1) here, used for the choice only), one group
  (n_group = topk_group = 1, as released), the chosen sigmoid scores renormalized and scaled by 1.8
  (`routed_scaling_factor`, the released value), plus one shared expert of width 32;
* `scoring_func: sigmoid` / `topk_method: noaux_tc` in config.json (transformers ignores both; the
  converter writes `expert_gating_func` 2 from `scoring_func`; without it llama.cpp assumes
  softmax unless the model has GLM-4.7-Flash's 47/48 layers and 154880 vocab).
Shape otherwise 21's COMMON (hidden 64, RMS eps 1e-6: transformers' q_a/kv_a norms always use
1e-6, llama.cpp uses the config's eps for every norm, so the released 1e-5 would make them differ).
Router weights N(0, 0.5) as 35 does (clear routing margins); seed 1026.

Tokenizer `bpe2048-glm`: bpe2048 plus GLM's special tokens [gMASK], <sop>, <|system|>, <|user|>,
<|assistant|>, <|observation|> (ids 2048-2053; <|endoftext|> is bpe2048's id 0), which the
converter's `_set_vocab_glm` looks up (eot = <|user|>, eom = <|observation|>; its bos = [gMASK] and
unk = <|endoftext|> only fill ids not named already, and bos/eos/pad stay bpe2048's <|im_start|>,
<|im_end|>, <|im_end|> as for the other fixtures); vocab_size 2054; a minimal GLM-style chat template.

The MTP block (config.json: `num_nextn_predict_layers` 1, `num_hidden_layers` 4 = the trunk) is
stored as `model.layers.4.*`, as GLM-4.7-Flash stores its layer 47: a full MoE decoder layer under a
trunk layer's tensor names (its weights from a 1-layer Glm4MoeLiteForCausalLM, seed 1026 + 1000,
perturbed the same way), plus `eh_proj.weight` [64, 128] (N(0, 0.1)), `enorm.weight`,
`hnorm.weight` and `shared_head.norm.weight` (1 + N(0, 0.1)); no own embed_tokens / shared_head.head:
the block uses the trunk's embedding and lm_head. transformers does not run it (loading the model
reports the `model.layers.4.*` tensors as unexpected and drops them; the trunk reference is
unchanged, checked below). llama.cpp's converter keeps it as blk.4 (`blk.4.nextn.eh_proj`, …).

MTP reference (mtp_reference.json, mtp_logits.f32le [L-1][vocab] little-endian f32), teacher-forced
over T = prompt ids + the 16 greedy ids of reference.json (L = 32), all float32:
  h_p = trunk(T)[p]: the final hidden state after the final norm (`model.model(T).last_hidden_state`),
  e_p = embed_tokens(T[p+1]),
  u_p = eh_proj · concat(enorm(e_p), hnorm(h_p))   (Glm4MoeLiteRMSNorm modules, eps from the config),
  logits_p = lm_head(shared_head.norm(layer4(u)_p)) for p = 0 .. L-2,
layer 4 run by transformers' own code: a 1-layer Glm4MoeLiteForCausalLM (mlp_layer_types ["sparse"])
loaded with layer 4's weights as its layer 0, shared_head.norm as its model.norm, the trunk's lm_head,
called with inputs_embeds = u and position_ids = 0 .. L-2 (causal attention over the entries; entry p,
the pair (h_p, T[p+1]), at rotary position p). Row p predicts T[p+2]. h_p is what llama.cpp's
trunk hands its draft-mtp (`t_h_nextn`, after output_norm); llama.cpp puts entry p at position p+1
(the same logits: RoPE is relative, `positions_plus_1_max_abs_diff`) and also caches a leading entry
(h = 0, T[0]) at position 0, which this reference has not (its effect: `with_leading_zero_h_entry`).
Checks: the trunk logits reloaded with the MTP tensors in the file equal logits.f32le; the MTP rows
run one entry at a time with the KV cache equal the full run; the selection bias changes experts.
"""
import importlib.util
import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tiny21", os.path.join(HERE, "21_make_tiny_models.py"))
tiny21 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny21)

SEED = 1026
NAME = "glm4-mtp"
TOK_NAME = "bpe2048-glm"
GLM_TOKENS = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
CHAT_TEMPLATE = ("[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
MTP_EXTRA = ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight")
_perturb = tiny21.perturb
bias_changed = {"n": 0}


def perturb(model, arch, seed):
    _perturb(model, arch, seed)
    # Clear routing margins (as 35) and a non-zero selection bias (GLM's `e_score_correction_bias`).
    tiny21.perturb_routers(model, seed, selection_bias=True)


def make_tokenizer(root, tok):
    """bpe2048 (TESTDATA_TINY_DIR/llama/hf/) + GLM's special tokens, into tok/TOK_NAME/."""
    dst = os.path.join(tok, TOK_NAME)
    os.makedirs(dst)
    src = os.path.join(root, "llama", "hf")
    with open(os.path.join(src, "tokenizer.json")) as f:
        tj = json.load(f)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        tc = json.load(f)
    n = len(tj["model"]["vocab"])
    assert n == tiny21.VOCAB and max(t["id"] for t in tj["added_tokens"]) < n
    for i, content in enumerate(GLM_TOKENS):
        entry = {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        tj["added_tokens"].append(dict(id=n + i, **{k: entry[k] for k in ("content", "single_word", "lstrip",
                                                                          "rstrip", "normalized", "special")}))
        tc["added_tokens_decoder"][str(n + i)] = entry
    tc["chat_template"] = CHAT_TEMPLATE
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tj, f, indent=2, ensure_ascii=False)
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
    with open(os.path.join(dst, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    return n + len(GLM_TOKENS)


def add_mtp_block(hf, kw, n_layers):
    """Append the MTP block to hf/model.safetensors as model.layers.<n_layers>.*."""
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM
    seed = SEED + 1000
    torch.manual_seed(seed)
    m = Glm4MoeLiteForCausalLM(Glm4MoeLiteConfig(**dict(kw, num_hidden_layers=1, mlp_layer_types=["sparse"]))).eval()
    perturb(m, NAME, seed)
    m = m.to(torch.bfloat16)
    path = os.path.join(hf, "model.safetensors")
    trunk = load_file(path)
    dtype = trunk["model.embed_tokens.weight"].dtype
    with tempfile.TemporaryDirectory() as d:
        m.save_pretrained(d, safe_serialization=True)     # transformers' on-disk names (per-expert)
        one = load_file(os.path.join(d, "model.safetensors"))
    pre = "model.layers.%d." % n_layers
    block = {pre + k[len("model.layers.0."):]: v for k, v in one.items() if k.startswith("model.layers.0.")}
    assert {k[len(pre):] for k in block} == {k[len("model.layers.1."):] for k in trunk if k.startswith("model.layers.1.")}
    h = kw["hidden_size"]
    g = torch.Generator().manual_seed(seed + 17)
    block[pre + "eh_proj.weight"] = kw["initializer_range"] * torch.randn(h, 2 * h, generator=g)
    for k in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        block[pre + k] = 1.0 + 0.1 * torch.randn(h, generator=g)
    out = dict(trunk)
    for k, v in block.items():
        assert k not in out
        out[k] = v.to(dtype).contiguous()
    save_file(out, path, metadata={"format": "pt"})
    os.chmod(path, 0o644)
    return sorted(block)


def count_bias_changes():
    """Count the rows whose chosen experts the selection bias changes (the check it is exercised)."""
    from transformers.models.glm4_moe_lite import modeling_glm4_moe_lite as mg
    orig = mg.Glm4MoeLiteTopkRouter.forward

    def forward(self, hidden_states):
        logits, w, idx = orig(self, hidden_states)
        plain = torch.topk(logits.sigmoid(), k=self.top_k, dim=-1).indices.sort(-1).values
        bias_changed["n"] += int((plain != idx.sort(-1).values).any(-1).sum())
        return logits, w, idx

    mg.Glm4MoeLiteTopkRouter.forward = forward


def mtp_reference(out, kw, n_layers):
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, DynamicCache, Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM
    from transformers.models.glm4_moe_lite.modeling_glm4_moe_lite import Glm4MoeLiteRMSNorm
    hf = os.path.join(out, "hf")
    with open(os.path.join(out, "reference.json")) as f:
        ref = json.load(f)
    tokens = ref["prompt_ids"] + ref["greedy_new_ids"]
    L = len(tokens)

    # The trunk, reloaded from the final files (the MTP tensors included: transformers drops them).
    trunk, info = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    trunk.eval()
    pre = "model.layers.%d." % n_layers
    assert not info["missing_keys"], info["missing_keys"]
    assert all(k.startswith(pre) for k in info["unexpected_keys"]) and info["unexpected_keys"], info
    print("transformers drops %d model.layers.%d.* tensors (unexpected keys)" % (len(info["unexpected_keys"]), n_layers))
    x = torch.tensor([tokens])
    with torch.no_grad():
        logits_pr = trunk(input_ids=x[:, :tiny21.N_PROMPT], use_cache=False).logits[0].float()
        h = trunk.model(input_ids=x, use_cache=False).last_hidden_state[0].float()   # [L, hidden], after norm
    import numpy as np
    saved = np.fromfile(os.path.join(out, "logits.f32le"), dtype="<f4").reshape(tiny21.N_PROMPT, -1)
    assert torch.equal(logits_pr, torch.from_numpy(saved)), "trunk logits changed by the MTP tensors"

    # u_p = eh_proj(cat(enorm(e_{p}), hnorm(h_p))), e_p = embed(T[p+1])
    t = load_file(os.path.join(hf, "model.safetensors"))
    eps, hid = trunk.config.rms_norm_eps, trunk.config.hidden_size
    norms = {}
    for k in ("enorm", "hnorm"):
        norms[k] = Glm4MoeLiteRMSNorm(hid, eps=eps)
        with torch.no_grad():
            norms[k].weight.copy_(t[pre + k + ".weight"].float())
    with torch.no_grad():
        e = trunk.model.embed_tokens(x[0, 1:]).float()                               # [L-1, hidden]
        cat = torch.cat([norms["enorm"](e), norms["hnorm"](h[:-1])], dim=-1)
        u = torch.nn.functional.linear(cat, t[pre + "eh_proj.weight"].float())      # [L-1, hidden]

    # The MTP block as a 1-layer Glm4MoeLiteForCausalLM, loaded by transformers from a temp dir.
    mcfg = Glm4MoeLiteConfig(**dict(kw, num_hidden_layers=1, mlp_layer_types=["sparse"]))
    mcfg.architectures = ["Glm4MoeLiteForCausalLM"]
    with tempfile.TemporaryDirectory() as d:
        mcfg.save_pretrained(d)
        sd = {"model.layers.0." + k[len(pre):]: v for k, v in t.items()
              if k.startswith(pre) and k[len(pre):] not in MTP_EXTRA}
        sd["model.norm.weight"] = t[pre + "shared_head.norm.weight"]
        sd["model.embed_tokens.weight"] = t["model.embed_tokens.weight"]
        sd["lm_head.weight"] = t["lm_head.weight"]
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        mtp, minfo = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                          output_loading_info=True)
    mtp.eval()
    assert not minfo["missing_keys"] and not minfo["unexpected_keys"], minfo
    pos = torch.arange(L - 1)[None]
    bias_changed["n"] = 0
    with torch.no_grad():
        logits = mtp(inputs_embeds=u[None], position_ids=pos, use_cache=False).logits[0].float()   # [L-1, V]
        n_bias = bias_changed["n"]
        # cross-check: one entry at a time with the HF KV cache
        cache = DynamicCache(config=mtp.config)
        inc = []
        for p in range(L - 1):
            o = mtp(inputs_embeds=u[None, p:p + 1], position_ids=pos[:, p:p + 1], cache=cache, use_cache=True)
            cache = o.cache
            inc.append(o.logits[0, -1].float())
        inc = torch.stack(inc)
        # RoPE is relative: the same entries one position later (llama.cpp puts T[p+1] at p+1)
        shifted = mtp(inputs_embeds=u[None], position_ids=pos + 1, use_cache=False).logits[0].float()
        # llama.cpp's draft-mtp also caches a leading entry (h = 0, T[0]) at position 0
        u0 = torch.nn.functional.linear(torch.cat([norms["enorm"](trunk.model.embed_tokens(x[0, :1]).float()),
                                                   norms["hnorm"](torch.zeros(1, hid))], dim=-1),
                                        t[pre + "eh_proj.weight"].float())
        lead = mtp(inputs_embeds=torch.cat([u0, u])[None], position_ids=torch.arange(L)[None],
                   use_cache=False).logits[0, 1:].float()
    inc_diff = float((inc - logits).abs().max())
    top2 = torch.topk(logits, 2, dim=-1)
    top5 = torch.topk(logits, 5, dim=-1)
    margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
    with open(os.path.join(out, "mtp_logits.f32le"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    mref = {
        "tokens": tokens,
        "rows": L - 1,
        "n_vocab": logits.shape[1],
        "mtp_layer": n_layers,
        "position_convention": "entry p (h_p, T[p+1]) at rotary position p",
        "formula": "h_p = trunk last_hidden_state (after model.norm) at p; e_p = embed_tokens(T[p+1]); "
                   "u_p = eh_proj(cat([enorm(e_p), hnorm(h_p)])); logits = lm_head(shared_head.norm("
                   "layer%d(u; positions 0..L-2, causal))); row p predicts T[p+2]" % n_layers,
        "logits_file": "mtp_logits.f32le (shape [%d, %d], little-endian float32, row = entry p)" % tuple(logits.shape),
        "argmax": logits.argmax(-1).tolist(),
        "margin_to_2nd": margins,
        "min_margin": min(margins),
        "top5": {"ids": top5.indices.tolist(), "logits": top5.values.tolist()},
        "row_stats": {"min": float(logits.min()), "max": float(logits.max()), "std": float(logits.std())},
        "matches_next_next_token": sum(int(a == b) for a, b in zip(logits.argmax(-1).tolist(), tokens[2:])),
        "rows_where_selection_bias_changes_experts": n_bias,
        "kv_cache_incremental_max_abs_diff": inc_diff,
        "positions_plus_1_max_abs_diff": float((shifted - logits).abs().max()),
        "with_leading_zero_h_entry": {
            "note": "llama.cpp's draft-mtp also caches (h = 0, T[0]) at position 0 and entry p at p+1; "
                    "these are the rows for entries 0..L-2 of that variant (not the reference)",
            "argmax": lead.argmax(-1).tolist(),
            "max_abs_diff": float((lead - logits).abs().max()),
            "rows_with_other_argmax": int((lead.argmax(-1) != logits.argmax(-1)).sum()),
        },
        "compute": "transformers %s, torch %s, float32, attn_implementation=eager" % (
            transformers.__version__, torch.__version__),
        "script": "36_make_tiny_glm4_mtp.py",
        "transformers": transformers.__version__,
    }
    with open(os.path.join(out, "mtp_reference.json"), "w") as f:
        json.dump(mref, f, indent=1)
    print("mtp argmax", mref["argmax"], "min margin %.4f" % min(margins), "bias changed %d rows" % n_bias,
          "incremental max diff %.2e" % inc_diff, "leading-entry variant", mref["with_leading_zero_h_entry"],
          flush=True)
    assert inc_diff < 1e-4 and n_bias > 0


def main():
    from transformers import Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM
    root = sys.argv[1]
    tiny21.perturb = perturb
    count_bias_changes()
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 0.707, "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}
    common = {k: v for k, v in tiny21.COMMON.items() if k not in ("head_dim", "num_key_value_heads")}
    n_layers = 4
    with tempfile.TemporaryDirectory() as tok:
        vocab = make_tokenizer(root, tok)
        kw = dict(common, **tiny21.BPE_IDS, vocab_size=vocab, num_hidden_layers=n_layers, num_key_value_heads=4,
                  max_position_embeddings=163840, tie_word_embeddings=False,
                  q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  intermediate_size=128, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                  n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=1.8, norm_topk_prob=True,
                  rope_interleave=True, rope_parameters=rope,
                  mlp_layer_types=["dense"] + ["sparse"] * (n_layers - 1),
                  # not Glm4MoeLiteConfig fields: kept in config.json for llama.cpp's converter
                  first_k_dense_replace=1, num_nextn_predict_layers=1, scoring_func="sigmoid",
                  topk_method="noaux_tc")
        bias_changed["n"] = 0
        tiny21.make(NAME, (Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM, kw, TOK_NAME, torch.bfloat16, SEED), tok, root)
    print("rows whose experts the selection bias changed in the trunk reference runs:", bias_changed["n"])
    assert bias_changed["n"] > 0, "the selection bias is not exercised"
    out = os.path.join(root, NAME)
    hf = os.path.join(out, "hf")
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    for k, v in (("num_hidden_layers", n_layers), ("num_nextn_predict_layers", 1), ("first_k_dense_replace", 1),
                 ("scoring_func", "sigmoid"), ("vocab_size", vocab)):
        assert cfg.get(k) == v, (k, cfg.get(k))
    names = add_mtp_block(hf, kw, n_layers)
    print("MTP block:", len(names), "tensors as model.layers.%d.*" % n_layers)
    mtp_reference(out, kw, n_layers)


if __name__ == "__main__":
    main()
