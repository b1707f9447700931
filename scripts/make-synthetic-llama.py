#!/usr/bin/env python3
"""Write a llama-architecture (or Gemma 2, Phi-3, gpt-oss, DeepSeek-V2) f16 GGUF with random weights
at a real model's shape, carrying the tokenizer of another GGUF (SmolLM2's: vocab 49152), for speed
comparisons at sizes that do not fit in cache (issue 13, "Measure").

Usage: make-synthetic-llama.py SHAPE OUT.gguf TOKENIZER_SRC.gguf
  SHAPE  1b (Llama-3.2-1B body), 8b (Llama-3.1-8B body), gemma2-2b (Gemma-2-2B body),
         phi3.5-mini (Phi-3.5-mini body), gpt-oss-20b (gpt-oss-20b body), deepseek2-lite
         (DeepSeek-V2-Lite body), qwen2.5-0.5b, qwen3-0.6b, qwen3moe-30b-a3b-2l
         (Qwen3-30B-A3B's layers, 2 of 48), or tiny, gpt-oss-tiny, deepseek2-tiny and
         qwen3moe-tiny (for testing this script), see SHAPES.
Then quantize with `llama-quantize OUT.gguf OUT.Q4_K_M.gguf Q4_K_M`
(scripts/make-bench-models.sh does both). A gpt-oss file: `... OUT.MXFP4.gguf MXFP4_MOE`.

gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE): the routed experts (ffn_{gate,up,down}_exps) are
written directly as MXFP4 (ggml type 39: per 32 values 1 E8M0 scale byte + 16 bytes of
4-bit E2M1 codes, element j in the low nibble of byte j, element j+16 in its high
nibble), as llama.cpp's converter writes them from the released checkpoint, so the 21B
parameters never exist as f16: the 20B file is ~12.0 GB (10.15 GB of MXFP4 experts, 1.27 GB
of f16 attention, 0.57 GB of f16 embeddings and head). Biases, attention sinks and the
router (ffn_gate_inp, as the converter keeps it) are f32, other matrices f16; general.file_type
is MOSTLY_MXFP4_MOE, as the converter sets it for such a checkpoint. `llama-quantize …
MXFP4_MOE` then copies the MXFP4 experts as they are (same type: no --allow-requantize
needed) and makes the other weight matrices Q8_0 (the router, biases and norms stay f32).
The embeddings and head have SmolLM2's 49,152 rows, not the real 201,088 (o200k_harmony),
so they are ~4x smaller than the real model's (0.28 GB each at f16 instead of 1.16 GB).
A 2-layer variant (1.52 GB) took 12 s at 350 MB peak RSS on the 2-core machine; the 20B
was not timed.

DeepSeek-V2-Lite (llama.cpp's LLM_ARCH_DEEPSEEK2, 27 layers, which llama.cpp takes as
"lite": no q_lora_rank, a plain attn_q): exactly the metadata and tensors (names, ggml
shapes, f32/f16 types) that llama.cpp's DeepseekV2Model converter (conversion/deepseek.py)
writes for deepseek-ai/DeepSeek-V2-Lite's config.json at --outtype f16, except for the
vocabulary (SmolLM2's 49,152 tokens instead of 102,400, so vocab_size 49152 and
embeddings and head ~2x smaller than the real model's: 0.20 GB each at f16 instead of
0.42 GB) and general.* (only name and file_type). MLA as the converter stores it: MQA
with head_count_kv 1, key_length 576 (kv_lora_rank 512 + rope 64), value_length 512,
key/value_length_mla 192/128; kv_b_proj split into attn_k_b (ggml [128, 512, 16], the
nope part transposed) and attn_v_b ([512, 128, 16]). Layer 0 has a dense FFN (n_ff
10944), layers 1-26 a softmax router over 64 experts of 1408 (6 used, weights not
renormalized, scale 1.0) plus 2 shared experts fused into one 2816-wide FFN. YaRN
factor 40 over 4096, yarn_log_multiplier 0.1 * mscale_all_dim (0.0707, the converter's
legacy convention). Norms and the router (ffn_gate_inp) are f32, every other matrix
f16. Checked on deepseek2-tiny (same code path, tiny widths): the converter run on a
random HF checkpoint of that config (vocabulary step skipped) gives the same 30
non-general, non-tokenizer keys and the same 404 tensor names, shapes and types; that
file (0.14 GB) takes 4 s and llama.cpp runs it (f16 and Q4_K_M).
The 15.5B-parameter file is 31.0 GB (28.8 GB of routed experts); it took 4.4 min on the
2-core machine (RNG-bound, ~120 MB/s) at 310 MB peak RSS. `llama-quantize … Q4_K_M`
makes it 10.2 GB in 17 min (see scripts/make-bench-models.sh).

Tested with Python 3.11, numpy 2.4.6, gguf 0.19.0 (`python3 -m pip install numpy gguf==0.19.0`).

Tensors are streamed to disk: the header, metadata and tensor infos are written
first (GGUFWriter's lower-level calls), then each tensor's data chunk by chunk
(CHUNK_ELEMS values at a time), so the 8B (14.8 GB of f16) needs ~310 MB of RAM
(peak RSS measured, same as the 1B), not the whole model as GGUFWriter.add_tensor +
write_tensors_to_file would. The 8B took ~7 min on the 2-core machine (disk-bound).
The output is written to OUT.gguf.tmp and renamed when complete.

Weights: N(0, 0.02^2) from numpy's PCG64 with a fixed seed (SEED), stored as f16;
norm vectors are 1.0 (f32); separate output.weight (not tied). gpt-oss's f32 tensors
(biases, sinks, router) are N(0, 0.02^2) too; its MXFP4 blocks have the scale byte
MXFP4_E (2^(120-127) = 1/128) and uniformly random codes (E2M1 values 0, ±0.5 … ±6,
RMS 2.93), so the values have RMS ~0.023. Speed does not depend on the values, so these
measure what real models of that size cost.
"""
import os
import sys

import gguf
import numpy as np

SHAPES = {  # n_embd, n_layer, n_ff, n_head, n_kv[, arch, head_dim[, n_expert, n_expert_used]]
    "1b": (2048, 16, 8192, 32, 8),  # Llama-3.2-1B body
    "8b": (4096, 32, 14336, 32, 8),  # Llama-3.1-8B body
    "tiny": (256, 2, 512, 4, 2),  # for testing the script itself
    # Gemma-2-2B body (issue 14's per-family measure): head_dim 256, pre and post norms,
    # soft-caps 50 / 30, sliding window 4096 on even layers, embeddings as the head.
    "gemma2-2b": (2304, 26, 9216, 8, 4, "gemma2", 256),
    # Phi-3.5-mini body: fused attn_qkv and gate‖up ffn_up, LongRoPE over an original 4096
    # (factors 1.0 here: speed does not depend on them; 128K context as released).
    "phi3.5-mini": (3072, 32, 8192, 32, 32, "phi3", 96),
    # gpt-oss-20b body (openai/gpt-oss-20b config.json), then n_expert, n_expert_used:
    # n_ff is the per-expert intermediate_size; 128-token sliding window on even layers
    # (llama.cpp's swa pattern 2, its default for gpt-oss), attention sinks, YaRN RoPE
    # (factor 32 over an original 4096, base 150000, 128K context).
    "gpt-oss-20b": (2880, 24, 2880, 64, 8, "gpt-oss", 64, 32, 4),
    # For testing the script: n_ff != n_embd and n_head * head_dim != n_embd, as in the 20B,
    # so a transposed shape fails llama.cpp's load.
    "gpt-oss-tiny": (256, 2, 384, 8, 2, "gpt-oss", 64, 4, 2),
    # DeepSeek-V2-Lite body (deepseek-ai/DeepSeek-V2-Lite config.json) as llama.cpp's
    # DeepseekV2Model converter writes it: MLA as MQA, so n_kv 1, and head_dim is
    # qk_nope + qk_rope (key_length_mla 128 + 64); n_ff is the dense first layer's
    # intermediate_size; 64 routed experts, 6 used. The rest is in MLA.
    "deepseek2-lite": (2048, 27, 10944, 16, 1, "deepseek2", 192, 64, 6),
    # For testing the script: llama.cpp reads no q_lora_rank (uses attn_q) only for 26 or
    # 27 layers, so 27 tiny layers; no matrix is square and attn_k_b / attn_v_b differ
    # (a transposed or swapped tensor fails the load): q 4 x (32 + 16), kv_a 128 + 16, v 4 x 48.
    "deepseek2-tiny": (256, 27, 512, 4, 1, "deepseek2", 48, 8, 2),
    # Qwen2.5-0.5B body (Qwen/Qwen2.5-0.5B config.json): q/k/v biases, tied embeddings,
    # RoPE base 1e6, epsilon 1e-6.
    "qwen2.5-0.5b": (896, 24, 4864, 14, 2, "qwen2", 64),
    # Qwen3-0.6B body: per-head q/k RMS norms, head_dim 128 (16 x 128 != 1024), tied.
    "qwen3-0.6b": (1024, 28, 3072, 16, 8, "qwen3", 128),
    # Qwen3-30B-A3B's layer shape (128 experts of 768, 8 used, 32/4 heads of 128, untied
    # head) with 2 of its 48 layers: the real per-layer widths at a disk cost of 2.6 GB f16.
    "qwen3moe-30b-a3b-2l": (2048, 2, 768, 32, 4, "qwen3moe", 128, 128, 8),
    # For testing the script: the same code paths at tiny widths.
    "qwen3moe-tiny": (256, 2, 128, 8, 2, "qwen3moe", 64, 8, 2),
}
# deepseek2's MLA and MoE extras: kv_lora_rank, qk_rope_head_dim, v_head_dim,
# moe_intermediate_size (per routed expert; the shared experts are n_shared_experts of
# these, fused), n_shared_experts, first_k_dense_replace. q_lora_rank is null (no attn_q_a).
MLA = {
    "deepseek2-lite": (512, 64, 128, 1408, 2, 1),
    "deepseek2-tiny": (128, 16, 48, 192, 2, 1),
}
SEED = 0
STD = 0.02
CHUNK_ELEMS = 1 << 24  # 16 Mi values per chunk: 64 MB of f32 + 32 MB of f16
MXFP4 = gguf.GGMLQuantizationType.MXFP4
QK_MXFP4, MXFP4_BYTES = gguf.GGML_QUANT_SIZES[MXFP4]  # 32 values, 17 bytes
MXFP4_E = 120  # E8M0 scale byte: ggml's value is kvalues_mxfp4[code] (2x E2M1) * 2^(e-128)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    shape, out, src = sys.argv[1:]
    E, L, F, H, KV, *rest = SHAPES[shape]
    arch, hd, *moe = rest if rest else ("llama", E // H)

    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(out + ".tmp", arch)
    # llama.cpp's vocabulary loader looks up Phi-3's "</s>" (absent from SmolLM2's vocabulary)
    # in any model whose name contains "phi3" or "phi-3": the Phi-3 body is "synthetic-phi_-…".
    w.add_name(f"synthetic-{arch}-{shape}".replace("phi3", "phi_"))
    w.add_context_length({"phi3": 131072, "gpt-oss": 131072, "deepseek2": 163840}.get(arch, 8192))
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    if arch == "gemma2":
        # What llama.cpp's Gemma2Model converter writes (no RoPE keys: base 10000).
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
        w.add_layer_norm_rms_eps(1e-6)
    elif arch == "phi3":
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(10000.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_attn_factors(1.1902380714238083)  # sqrt(1 + ln 32 / ln 4096)
        w.add_sliding_window(0)
        w.add_layer_norm_rms_eps(1e-5)
    elif arch == "gpt-oss":
        # What llama.cpp's GptOssModel converter writes (base set_gguf_parameters, then
        # the sliding window and expert FFN length). No rope.dimension_count: head_dim.
        NE, NEU = moe
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_yarn_beta_fast(32.0)
        w.add_rope_scaling_yarn_beta_slow(1.0)
        w.add_rope_freq_base(150000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_expert_count(NE)
        w.add_expert_used_count(NEU)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(128)
        w.add_expert_feed_forward_length(F)
    elif arch == "deepseek2":
        # What llama.cpp's DeepseekV2Model converter writes for DeepSeek-V2-Lite's config:
        # base set_gguf_parameters (YaRN factor 40 over 4096, beta 32 / 1, base 10000; no
        # attention factor: "mscale" is not one of its keys; experts 64 / 6; n_group and
        # topk_group 1; scoring_func softmax), then MLA as MQA with the latent as the KV
        # head: key_length kv_lora_rank + rope dim, value_length kv_lora_rank, the real
        # per-head sizes as key/value_length_mla. No q_lora_rank (null); no
        # expert_weights_norm (norm_topk_prob false).
        NE, NEU = moe
        kv_lora, n_rot, hv, F_exp, n_shexp, n_dense = MLA[shape]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(40.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_yarn_beta_fast(32.0)
        w.add_rope_scaling_yarn_beta_slow(1.0)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_count(NE)
        w.add_expert_used_count(NEU)
        w.add_expert_group_count(1)
        w.add_expert_group_used_count(1)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
        w.add_leading_dense_block_count(n_dense)
        w.add_kv_lora_rank(kv_lora)
        w.add_key_length(kv_lora + n_rot)
        w.add_value_length(kv_lora)
        w.add_key_length_mla(hd)
        w.add_value_length_mla(hv)
        w.add_expert_feed_forward_length(F_exp)
        w.add_expert_shared_count(n_shexp)
        w.add_expert_weights_scale(1.0)  # routed_scaling_factor
        w.add_rope_dimension_count(n_rot)
        # 0.1 * mscale_all_dim: llama.cpp divides by 0.1 again ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX])
        w.add_rope_scaling_yarn_log_mul(0.1 * 0.707)
    elif arch in ("qwen2", "qwen3", "qwen3moe"):
        # What llama.cpp's Qwen2Model / Qwen3Model / Qwen3MoeModel converters write (the
        # base set_gguf_parameters; key/value_length from config's head_dim for Qwen3).
        w.add_rope_freq_base(1000000.0)
        w.add_layer_norm_rms_eps(1e-6)
        if arch != "qwen2":
            w.add_key_length(hd)
            w.add_value_length(hd)
        if arch == "qwen3moe":
            NE, NEU = moe
            w.add_expert_count(NE)
            w.add_expert_used_count(NEU)
            w.add_expert_feed_forward_length(F)
    else:
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(500000.0)
        w.add_layer_norm_rms_eps(1e-5)
    if arch == "gpt-oss":
        w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)  # has quantized tensors
    else:
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Every tokenizer.* key of the source, copied with its type (strings as raw bytes).
    n_vocab = None
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(name, val, t, sub_type=sub)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]), t)
        else:
            w.add_key_value(name, f.parts[f.data[0]][0].item(), t)
    if n_vocab is None:
        sys.exit(f"{src}: no tokenizer.ggml.tokens")
    if arch in ("llama", "deepseek2"):
        w.add_vocab_size(n_vocab)

    # (name, dims, kind): dims outermost first (numpy order, the reverse of GGUF's ne), so
    # the last entry is ne0, contiguous. kind: "ones" f32 1.0, "mat" f16 random, "f32"
    # f32 random, "mxfp4" MXFP4 random (ne0 a multiple of 32).
    tensors = [
        ("token_embd.weight", (n_vocab, E), "mat"),
        ("output_norm.weight", (E,), "ones"),
    ]
    if arch in ("llama", "phi3", "gpt-oss", "deepseek2", "qwen3moe"):
        tensors.append(("output.weight", (n_vocab, E), "mat"))
    if arch == "phi3":
        tensors = [("rope_factors_long.weight", (hd // 2,), "ones"),
                   ("rope_factors_short.weight", (hd // 2,), "ones")] + tensors
    for i in range(L):
        p = f"blk.{i}."
        if arch == "phi3":
            tensors += [
                (p + "attn_norm.weight", (E,), "ones"),
                (p + "attn_qkv.weight", ((H + 2 * KV) * hd, E), "mat"),
                (p + "attn_output.weight", (E, H * hd), "mat"),
                (p + "ffn_norm.weight", (E,), "ones"),
                (p + "ffn_up.weight", (2 * F, E), "mat"),
                (p + "ffn_down.weight", (E, F), "mat"),
            ]
            continue
        if arch == "gpt-oss":
            # llama.cpp's src/models/openai-moe.cpp; post_attention_norm is the pre-FFN norm.
            tensors += [
                (p + "attn_norm.weight", (E,), "ones"),
                (p + "post_attention_norm.weight", (E,), "ones"),
                (p + "attn_q.weight", (H * hd, E), "mat"),
                (p + "attn_q.bias", (H * hd,), "f32"),
                (p + "attn_k.weight", (KV * hd, E), "mat"),
                (p + "attn_k.bias", (KV * hd,), "f32"),
                (p + "attn_v.weight", (KV * hd, E), "mat"),
                (p + "attn_v.bias", (KV * hd,), "f32"),
                (p + "attn_output.weight", (E, H * hd), "mat"),
                (p + "attn_output.bias", (E,), "f32"),
                (p + "attn_sinks.weight", (H,), "f32"),
                (p + "ffn_gate_inp.weight", (NE, E), "f32"),
                (p + "ffn_gate_inp.bias", (NE,), "f32"),
                (p + "ffn_gate_exps.weight", (NE, F, E), "mxfp4"),
                (p + "ffn_gate_exps.bias", (NE, F), "f32"),
                (p + "ffn_up_exps.weight", (NE, F, E), "mxfp4"),
                (p + "ffn_up_exps.bias", (NE, F), "f32"),
                (p + "ffn_down_exps.weight", (NE, E, F), "mxfp4"),
                (p + "ffn_down_exps.bias", (NE, E), "f32"),
            ]
            continue
        if arch == "deepseek2":
            # llama.cpp's src/models/deepseek2.cpp (lite: attn_q, no q_lora). kv_b_proj
            # (H x (nope + v) rows of kv_lora) is split by the converter into attn_k_b,
            # transposed (ggml [nope, kv_lora, H]), and attn_v_b (ggml [kv_lora, v, H]).
            # The router (ffn_gate_inp) is f32, as the converter keeps it; the shared
            # experts are one FFN of n_shexp * F_exp.
            nope = hd - n_rot
            tensors += [
                (p + "attn_norm.weight", (E,), "ones"),
                (p + "attn_q.weight", (H * hd, E), "mat"),
                (p + "attn_kv_a_mqa.weight", (kv_lora + n_rot, E), "mat"),
                (p + "attn_kv_a_norm.weight", (kv_lora,), "ones"),
                (p + "attn_k_b.weight", (H, kv_lora, nope), "mat"),
                (p + "attn_v_b.weight", (H, hv, kv_lora), "mat"),
                (p + "attn_output.weight", (E, H * hv), "mat"),
                (p + "ffn_norm.weight", (E,), "ones"),
            ]
            if i < n_dense:
                tensors += [
                    (p + "ffn_gate.weight", (F, E), "mat"),
                    (p + "ffn_up.weight", (F, E), "mat"),
                    (p + "ffn_down.weight", (E, F), "mat"),
                ]
            else:
                tensors += [
                    (p + "ffn_gate_inp.weight", (NE, E), "f32"),
                    (p + "ffn_gate_exps.weight", (NE, F_exp, E), "mat"),
                    (p + "ffn_up_exps.weight", (NE, F_exp, E), "mat"),
                    (p + "ffn_down_exps.weight", (NE, E, F_exp), "mat"),
                    (p + "ffn_gate_shexp.weight", (n_shexp * F_exp, E), "mat"),
                    (p + "ffn_up_shexp.weight", (n_shexp * F_exp, E), "mat"),
                    (p + "ffn_down_shexp.weight", (E, n_shexp * F_exp), "mat"),
                ]
            continue
        if arch in ("qwen2", "qwen3", "qwen3moe"):
            # llama.cpp's src/models/qwen2.cpp / qwen3.cpp / qwen3moe.cpp; the router f32
            # as the converter keeps it.
            tensors += [
                (p + "attn_norm.weight", (E,), "ones"),
                (p + "attn_q.weight", (H * hd, E), "mat"),
                (p + "attn_k.weight", (KV * hd, E), "mat"),
                (p + "attn_v.weight", (KV * hd, E), "mat"),
                (p + "attn_output.weight", (E, H * hd), "mat"),
                (p + "ffn_norm.weight", (E,), "ones"),
            ]
            if arch == "qwen2":
                tensors += [
                    (p + "attn_q.bias", (H * hd,), "f32"),
                    (p + "attn_k.bias", (KV * hd,), "f32"),
                    (p + "attn_v.bias", (KV * hd,), "f32"),
                ]
            else:
                tensors += [
                    (p + "attn_q_norm.weight", (hd,), "ones"),
                    (p + "attn_k_norm.weight", (hd,), "ones"),
                ]
            if arch == "qwen3moe":
                NE, NEU = moe
                tensors += [
                    (p + "ffn_gate_inp.weight", (NE, E), "f32"),
                    (p + "ffn_gate_exps.weight", (NE, F, E), "mat"),
                    (p + "ffn_up_exps.weight", (NE, F, E), "mat"),
                    (p + "ffn_down_exps.weight", (NE, E, F), "mat"),
                ]
            else:
                tensors += [
                    (p + "ffn_gate.weight", (F, E), "mat"),
                    (p + "ffn_up.weight", (F, E), "mat"),
                    (p + "ffn_down.weight", (E, F), "mat"),
                ]
            continue
        tensors += [
            (p + "attn_norm.weight", (E,), "ones"),
            (p + "attn_q.weight", (H * hd, E), "mat"),
            (p + "attn_k.weight", (KV * hd, E), "mat"),
            (p + "attn_v.weight", (KV * hd, E), "mat"),
            (p + "attn_output.weight", (E, H * hd), "mat"),
            (p + "ffn_norm.weight", (E,), "ones"),
            (p + "ffn_gate.weight", (F, E), "mat"),
            (p + "ffn_up.weight", (F, E), "mat"),
            (p + "ffn_down.weight", (E, F), "mat"),
        ]
        if arch == "gemma2":
            tensors += [
                (p + "post_attention_norm.weight", (E,), "ones"),
                (p + "post_ffw_norm.weight", (E,), "ones"),
            ]
    for name, dims, kind in tensors:
        n = int(np.prod(dims))
        if kind == "mxfp4":
            assert dims[-1] % QK_MXFP4 == 0, (name, dims)
            byte_shape = (*dims[:-1], dims[-1] // QK_MXFP4 * MXFP4_BYTES)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), n // QK_MXFP4 * MXFP4_BYTES,
                              raw_dtype=MXFP4)
        elif kind == "mat":
            w.add_tensor_info(name, dims, np.dtype(np.float16), 2 * n)
        else:
            w.add_tensor_info(name, dims, np.dtype(np.float32), 4 * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    fout = w.fout[0]
    align = w.data_alignment
    pad = lambda n: fout.write(b"\0" * (-n % align))
    pad(fout.tell())
    rng = np.random.default_rng(SEED)
    buf32 = np.empty(CHUNK_ELEMS, dtype=np.float32)
    buf16 = np.empty(CHUNK_ELEMS, dtype=np.float16)
    bufq = None
    total = 0
    for name, dims, kind in tensors:
        n = int(np.prod(dims))
        if kind == "ones":
            data = np.ones(n, dtype=np.float32)
            data.tofile(fout)
            nbytes = data.nbytes
        elif kind == "mxfp4":
            # Block by block, CHUNK_ELEMS / 32 blocks (8.9 MB) at a time: the scale byte,
            # then 16 bytes of random codes.
            if bufq is None:
                bufq = np.empty((CHUNK_ELEMS // QK_MXFP4, MXFP4_BYTES), dtype=np.uint8)
                bufq[:, 0] = MXFP4_E
            nb = n // QK_MXFP4
            done = 0
            while done < nb:
                k = min(len(bufq), nb - done)
                codes = np.frombuffer(rng.bytes(k * (MXFP4_BYTES - 1)), dtype=np.uint8)
                bufq[:k, 1:] = codes.reshape(k, MXFP4_BYTES - 1)
                bufq[:k].tofile(fout)
                done += k
            nbytes = nb * MXFP4_BYTES
        else:
            done = 0
            while done < n:
                k = min(CHUNK_ELEMS, n - done)
                a32, a16 = buf32[:k], buf16[:k]
                rng.standard_normal(out=a32, dtype=np.float32)
                a32 *= STD
                if kind == "mat":
                    np.copyto(a16, a32, casting="same_kind")
                    a16.tofile(fout)
                else:
                    a32.tofile(fout)
                done += k
            nbytes = (2 if kind == "mat" else 4) * n
        pad(nbytes)
        total += nbytes
    fout.flush()
    os.fsync(fout.fileno())
    w.close()
    os.replace(out + ".tmp", out)
    print(f"{out}: {shape}, vocab {n_vocab}, {total / 1e9:.2f} GB of tensor data")


if __name__ == "__main__":
    main()
