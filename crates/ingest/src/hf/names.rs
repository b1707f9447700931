//! Hugging Face tensor names → GGUF tensor names.
//!
//! The tables follow llama.cpp's `gguf-py/gguf/tensor_mapping.py` for the
//! architectures the runtime supports. Anything not in a table keeps its HF name
//! (it is still listed and packed, just not understood).

/// What an HF tensor name maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HfName {
    /// A GGUF tensor name.
    Gguf(String),
    /// One expert's matrix of a stacked GGUF expert tensor.
    Expert {
        /// Layer number.
        layer: u64,
        /// Expert number.
        expert: u64,
        /// Name of the stacked GGUF tensor (`blk.N.ffn_gate_exps.weight`).
        stacked: String,
    },
    /// One matrix of a stacked GGUF tensor that is not per expert: Gemma 3n's
    /// `model.altup_projections.{0,1,2}` → `altup_proj.weight` and
    /// `model.altup_unembed_projections.{0,1,2}` → `altup_unembd_proj.weight`
    /// (the converter's `torch.stack(..., dim=0)`).
    Part {
        /// Position in the stack (outermost GGUF dimension).
        index: u64,
        /// Name of the stacked GGUF tensor.
        stacked: String,
    },
    /// Column-strided, optionally transposed views of one HF tensor, each a
    /// GGUF tensor ([`crate::Transform::Strided`]): gpt-oss's
    /// `mlp.experts.gate_up_proj` (gate and up interleaved by column,
    /// `[n_expert][n_embd][2·n_ff]`) → `ffn_gate_exps` and `ffn_up_exps`.
    Strided {
        /// `(GGUF name, first column)` of each view.
        parts: Vec<(String, u64)>,
        /// Every `stride`-th column.
        stride: u64,
        /// Transpose the two inner axes (weights; biases are 2-D and not).
        transpose: bool,
    },
    /// gpt-oss's MXFP4 experts as OpenAI ships them: the `*_blocks` tensor
    /// (`[n_expert][rows][cols/32][16]` codes), read with its `*_scales`
    /// (`[n_expert][rows][cols/32]` E8M0 exponents) into ggml MXFP4 blocks
    /// ([`crate::Transform::Mxfp4`]), every `stride`-th row from `first` per
    /// part (gate and up are interleaved by row).
    Mxfp4 {
        /// `(GGUF name, first row)` of each part.
        parts: Vec<(String, u64)>,
        /// Every `stride`-th row.
        stride: u64,
        /// The HF name of the scales.
        scales: String,
    },
    /// DeepSeek's `self_attn.kv_b_proj` (`[n_head · (nope + v)][latent]`),
    /// split per head into `attn_k_b` (the `nope` rows, transposed) and
    /// `attn_v_b` (the `v` rows), as llama.cpp's `DeepseekV2Model` does for
    /// MLA with absorption ([`crate::Transform::Strided`] with a row range).
    MlaKvB {
        /// `blk.N.attn_k_b.weight`.
        k_b: String,
        /// `blk.N.attn_v_b.weight`.
        v_b: String,
    },
    /// Read as part of another tensor (the `*_scales` of an [`HfName::Mxfp4`]).
    Consumed,
    /// Not understood: keep the HF name.
    Unmapped,
}

/// Strips the prefixes multimodal checkpoints put before the text model.
fn normalize(hf: &str) -> std::borrow::Cow<'_, str> {
    for (from, to) in [
        ("model.language_model.", "model."),
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
    ] {
        if let Some(rest) = hf.strip_prefix(from) {
            return format!("{to}{rest}").into();
        }
    }
    // Bare `*Model` checkpoints (Qwen2Model, LlamaModel) have no `model.` prefix.
    if hf.starts_with("layers.") || hf == "embed_tokens.weight" || hf == "norm.weight" {
        return format!("model.{hf}").into();
    }
    hf.into()
}

/// Architectures llama.cpp converts with its `LlamaModel` (q/k rows permuted
/// for its rotation, `vocab_size` and `rope.dimension_count` written, Llama 3
/// RoPE factors generated): llama itself, SmolLM3 and Granite.
pub fn llama_like(arch: &str) -> bool {
    matches!(arch, "llama" | "smollm3" | "granite")
}

/// gpt-oss's names that do not follow the `module.weight` pattern:
/// `self_attn.sinks` and the stacked, interleaved experts (as llama.cpp's
/// `GptOssModel.modify_tensors` maps them).
fn gpt_oss_name(layer: u64, rest: &str) -> Option<HfName> {
    let blk = |g: &str| format!("blk.{layer}.{g}");
    let strided = |parts: [(&str, u64); 2], n: usize, transpose| HfName::Strided {
        parts: parts[..n].iter().map(|&(g, f)| (blk(g), f)).collect(),
        stride: n as u64,
        transpose,
    };
    Some(match rest {
        "self_attn.sinks" => HfName::Gguf(blk("attn_sinks.weight")),
        "mlp.router.weight" => HfName::Gguf(blk("ffn_gate_inp.weight")),
        "mlp.router.bias" => HfName::Gguf(blk("ffn_gate_inp.bias")),
        "mlp.experts.gate_up_proj" => strided(
            [("ffn_gate_exps.weight", 0), ("ffn_up_exps.weight", 1)],
            2,
            true,
        ),
        "mlp.experts.gate_up_proj_bias" => strided(
            [("ffn_gate_exps.bias", 0), ("ffn_up_exps.bias", 1)],
            2,
            false,
        ),
        "mlp.experts.down_proj" => strided([("ffn_down_exps.weight", 0), ("", 0)], 1, true),
        "mlp.experts.down_proj_bias" => HfName::Gguf(blk("ffn_down_exps.bias")),
        "mlp.experts.gate_up_proj_blocks" => HfName::Mxfp4 {
            parts: vec![
                (blk("ffn_gate_exps.weight"), 0),
                (blk("ffn_up_exps.weight"), 1),
            ],
            stride: 2,
            scales: format!("model.layers.{layer}.mlp.experts.gate_up_proj_scales"),
        },
        "mlp.experts.down_proj_blocks" => HfName::Mxfp4 {
            parts: vec![(blk("ffn_down_exps.weight"), 0)],
            stride: 1,
            scales: format!("model.layers.{layer}.mlp.experts.down_proj_scales"),
        },
        "mlp.experts.gate_up_proj_scales" | "mlp.experts.down_proj_scales" => HfName::Consumed,
        "post_attention_layernorm.weight" => HfName::Gguf(blk("post_attention_norm.weight")),
        _ => return None,
    })
}

/// DeepSeek-V2/V3's own names (llama.cpp's tensor_mapping for
/// MODEL_ARCH.DEEPSEEK2): MLA's projections and norms, the shared experts,
/// V3's selection bias; `kv_b_proj` is split ([`HfName::MlaKvB`]).
fn deepseek2_name(layer: u64, rest: &str) -> Option<HfName> {
    let g = match rest {
        "self_attn.kv_b_proj.weight" => {
            return Some(HfName::MlaKvB {
                k_b: format!("blk.{layer}.attn_k_b.weight"),
                v_b: format!("blk.{layer}.attn_v_b.weight"),
            })
        }
        "self_attn.q_a_proj.weight" => "attn_q_a.weight",
        "self_attn.q_a_layernorm.weight" => "attn_q_a_norm.weight",
        "self_attn.q_b_proj.weight" => "attn_q_b.weight",
        "self_attn.kv_a_proj_with_mqa.weight" => "attn_kv_a_mqa.weight",
        "self_attn.kv_a_layernorm.weight" => "attn_kv_a_norm.weight",
        "mlp.shared_experts.gate_proj.weight" => "ffn_gate_shexp.weight",
        "mlp.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
        "mlp.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
        "mlp.gate.e_score_correction_bias" => "exp_probs_b.bias",
        // The multi-token-prediction block after the trunk (DeepSeek-V3,
        // GLM-4.7-Flash: `model.layers.{num_hidden_layers}.*`), named as
        // llama.cpp's converter names it.
        "eh_proj.weight" => "nextn.eh_proj.weight",
        "enorm.weight" => "nextn.enorm.weight",
        "hnorm.weight" => "nextn.hnorm.weight",
        "embed_tokens.weight" => "nextn.embed_tokens.weight",
        "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
        "shared_head.head.weight" => "nextn.shared_head_head.weight",
        _ => return None,
    };
    Some(HfName::Gguf(format!("blk.{layer}.{g}")))
}

/// Maps an HF tensor name of a model of GGUF architecture `arch`
/// (`"llama"`, `"smollm3"`, `"granite"`, `"qwen2"`, `"qwen3"`, `"qwen3moe"`, `"gemma2"`, `"gemma3"`,
/// `"gemma3n"`, `"olmo2"`, `"phi3"`, `"gpt-oss"`, `"deepseek2"`; mixtral is `"llama"`).
pub fn map_tensor_name(arch: &str, hf: &str) -> HfName {
    if !llama_like(arch)
        && !matches!(
            arch,
            "qwen2"
                | "qwen3"
                | "qwen3moe"
                | "gemma2"
                | "gemma3"
                | "gemma3n"
                | "olmo2"
                | "phi3"
                | "gpt-oss"
                | "deepseek2"
        )
    {
        return HfName::Unmapped;
    }
    let gemma3n = arch == "gemma3n";
    let hf = normalize(hf);
    // Gemma3NModel.filter_tensors: `altup.correct_output_scale` has no `.weight`.
    let hf = match hf {
        n if gemma3n && n.ends_with("_scale") => format!("{n}.weight").into(),
        n => n,
    };
    let hf = hf.as_ref();
    let top = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "lm_head.weight" => Some("output.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "model.embed_tokens_per_layer.weight" if gemma3n => Some("per_layer_token_embd.weight"),
        "model.per_layer_model_projection.weight" if gemma3n => Some("per_layer_model_proj.weight"),
        "model.per_layer_projection_norm.weight" if gemma3n => Some("per_layer_proj_norm.weight"),
        _ => None,
    };
    if let Some(g) = top {
        return HfName::Gguf(g.to_string());
    }
    if gemma3n {
        // AltUp projections, stacked by the converter: `model.altup_projections.I.weight`.
        for (prefix, stacked) in [
            ("model.altup_projections.", "altup_proj.weight"),
            (
                "model.altup_unembed_projections.",
                "altup_unembd_proj.weight",
            ),
        ] {
            let Some(rest) = hf.strip_prefix(prefix) else {
                continue;
            };
            return match rest.strip_suffix(".weight").map(|i| (i, i.parse::<u64>())) {
                Some((i, Ok(index))) if index.to_string() == i => HfName::Part {
                    index,
                    stacked: stacked.to_string(),
                },
                _ => HfName::Unmapped,
            };
        }
    }
    let Some(rest) = hf.strip_prefix("model.layers.") else {
        return HfName::Unmapped;
    };
    let Some((l, rest)) = rest.split_once('.') else {
        return HfName::Unmapped;
    };
    let Ok(layer) = l.parse::<u64>() else {
        return HfName::Unmapped;
    };
    if layer.to_string() != l {
        // Leading zeros or a sign: not a name transformers writes.
        return HfName::Unmapped;
    }
    if arch == "gpt-oss" {
        if let Some(m) = gpt_oss_name(layer, rest) {
            return m;
        }
    }
    if arch == "deepseek2" {
        if let Some(m) = deepseek2_name(layer, rest) {
            return m;
        }
    }
    let Some((module, kind)) = rest.rsplit_once('.') else {
        return HfName::Unmapped;
    };
    if kind != "weight" && kind != "bias" {
        return HfName::Unmapped;
    }

    // Routed experts: qwen3moe `mlp.experts.E.{gate,up,down}_proj`, mixtral
    // `block_sparse_moe.experts.E.{w1,w3,w2}`.
    let expert = module
        .strip_prefix("mlp.experts.")
        .or_else(|| module.strip_prefix("block_sparse_moe.experts."))
        .and_then(|r| r.split_once('.'));
    if let Some((e, proj)) = expert {
        let which = match proj {
            "gate_proj" | "w1" => "gate",
            "up_proj" | "w3" => "up",
            "down_proj" | "w2" => "down",
            _ => return HfName::Unmapped,
        };
        let Ok(expert) = e.parse::<u64>() else {
            return HfName::Unmapped;
        };
        if kind != "weight" || expert.to_string() != e {
            return HfName::Unmapped;
        }
        return HfName::Expert {
            layer,
            expert,
            stacked: format!("blk.{layer}.ffn_{which}_exps.weight"),
        };
    }

    let gemma = matches!(arch, "gemma2" | "gemma3") || gemma3n;
    // Norms after the attention and the FFN (Gemma's sandwich, OLMo 2's post-norm).
    let post_norms = gemma || arch == "olmo2";
    let g = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        // Phi-3's fused projections, kept fused (gate‖up as one `ffn_up`).
        "self_attn.qkv_proj" if arch == "phi3" => "attn_qkv",
        "mlp.gate_up_proj" if arch == "phi3" => "ffn_up",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if post_norms => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" if gemma => "ffn_norm",
        "post_feedforward_layernorm" if post_norms => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" | "block_sparse_moe.gate" => "ffn_gate_inp",
        "per_layer_input_gate" if gemma3n => "inp_gate",
        "per_layer_projection" if gemma3n => "proj",
        "post_per_layer_input_norm" if gemma3n => "post_norm",
        "altup.correction_coefs" if gemma3n => "altup_correct_coef",
        "altup.correct_output_scale" if gemma3n => "altup_correct_scale",
        "altup.prediction_coefs" if gemma3n => "altup_predict_coef",
        "altup.modality_router" if gemma3n => "altup_router",
        "altup.router_norm" if gemma3n => "altup_router_norm",
        "laurel.linear_left" if gemma3n => "laurel_l",
        "laurel.linear_right" if gemma3n => "laurel_r",
        "laurel.post_laurel_norm" if gemma3n => "laurel_post_norm",
        _ => return HfName::Unmapped,
    };
    HfName::Gguf(format!("blk.{layer}.{g}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(arch: &str, hf: &str) -> Option<String> {
        match map_tensor_name(arch, hf) {
            HfName::Gguf(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn common_names() {
        assert_eq!(
            g("llama", "model.embed_tokens.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            g("qwen2", "model.layers.12.self_attn.q_proj.bias").as_deref(),
            Some("blk.12.attn_q.bias")
        );
        assert_eq!(
            g("llama", "model.layers.0.post_attention_layernorm.weight").as_deref(),
            Some("blk.0.ffn_norm.weight")
        );
        assert_eq!(
            g("gemma3", "model.layers.0.post_attention_layernorm.weight").as_deref(),
            Some("blk.0.post_attention_norm.weight")
        );
        assert_eq!(
            g("gemma3", "model.language_model.norm.weight").as_deref(),
            Some("output_norm.weight")
        );
        assert_eq!(
            g("qwen2", "layers.3.mlp.up_proj.weight").as_deref(),
            Some("blk.3.ffn_up.weight")
        );
        assert_eq!(
            g("qwen2", "norm.weight").as_deref(),
            Some("output_norm.weight")
        );
        assert_eq!(g("llama", "model.layers.01.mlp.up_proj.weight"), None);
        assert_eq!(g("llama", "model.layers.x.mlp.up_proj.weight"), None);
        assert_eq!(g("phi2", "model.embed_tokens.weight"), None);
        assert_eq!(
            g("phi3", "model.layers.1.self_attn.qkv_proj.weight").as_deref(),
            Some("blk.1.attn_qkv.weight")
        );
        assert_eq!(
            g("phi3", "model.layers.1.mlp.gate_up_proj.weight").as_deref(),
            Some("blk.1.ffn_up.weight")
        );
        assert_eq!(g("llama", "model.layers.1.mlp.gate_up_proj.weight"), None);
        assert_eq!(g("llama", "model.layers.0.mlp.up_proj.scales"), None);
    }

    #[test]
    fn gemma3n_names() {
        let cases = [
            ("model.embed_tokens.weight", "token_embd.weight"),
            (
                "model.embed_tokens_per_layer.weight",
                "per_layer_token_embd.weight",
            ),
            (
                "model.per_layer_model_projection.weight",
                "per_layer_model_proj.weight",
            ),
            (
                "model.per_layer_projection_norm.weight",
                "per_layer_proj_norm.weight",
            ),
            ("model.norm.weight", "output_norm.weight"),
            (
                "model.layers.3.per_layer_input_gate.weight",
                "blk.3.inp_gate.weight",
            ),
            (
                "model.layers.3.per_layer_projection.weight",
                "blk.3.proj.weight",
            ),
            (
                "model.layers.3.post_per_layer_input_norm.weight",
                "blk.3.post_norm.weight",
            ),
            (
                "model.layers.0.altup.correct_output_scale",
                "blk.0.altup_correct_scale.weight",
            ),
            (
                "model.layers.0.altup.correction_coefs.weight",
                "blk.0.altup_correct_coef.weight",
            ),
            (
                "model.layers.0.altup.prediction_coefs.weight",
                "blk.0.altup_predict_coef.weight",
            ),
            (
                "model.layers.0.altup.modality_router.weight",
                "blk.0.altup_router.weight",
            ),
            (
                "model.layers.0.altup.router_norm.weight",
                "blk.0.altup_router_norm.weight",
            ),
            (
                "model.layers.1.laurel.linear_left.weight",
                "blk.1.laurel_l.weight",
            ),
            (
                "model.layers.1.laurel.linear_right.weight",
                "blk.1.laurel_r.weight",
            ),
            (
                "model.layers.1.laurel.post_laurel_norm.weight",
                "blk.1.laurel_post_norm.weight",
            ),
            (
                "model.layers.2.input_layernorm.weight",
                "blk.2.attn_norm.weight",
            ),
            (
                "model.layers.2.post_attention_layernorm.weight",
                "blk.2.post_attention_norm.weight",
            ),
            (
                "model.layers.2.pre_feedforward_layernorm.weight",
                "blk.2.ffn_norm.weight",
            ),
            (
                "model.layers.2.post_feedforward_layernorm.weight",
                "blk.2.post_ffw_norm.weight",
            ),
            (
                "model.layers.2.self_attn.q_norm.weight",
                "blk.2.attn_q_norm.weight",
            ),
            (
                "model.layers.2.self_attn.k_norm.weight",
                "blk.2.attn_k_norm.weight",
            ),
            (
                "model.layers.2.self_attn.v_proj.weight",
                "blk.2.attn_v.weight",
            ),
            (
                "model.layers.2.mlp.down_proj.weight",
                "blk.2.ffn_down.weight",
            ),
            // Gemma3nForConditionalGeneration's text model.
            (
                "model.language_model.embed_tokens_per_layer.weight",
                "per_layer_token_embd.weight",
            ),
            (
                "model.language_model.layers.5.laurel.linear_left.weight",
                "blk.5.laurel_l.weight",
            ),
        ];
        for (hf, want) in cases {
            assert_eq!(g("gemma3n", hf).as_deref(), Some(want), "{hf}");
        }
        assert_eq!(
            map_tensor_name("gemma3n", "model.altup_projections.2.weight"),
            HfName::Part {
                index: 2,
                stacked: "altup_proj.weight".into()
            }
        );
        assert_eq!(
            map_tensor_name(
                "gemma3n",
                "model.language_model.altup_unembed_projections.0.weight"
            ),
            HfName::Part {
                index: 0,
                stacked: "altup_unembd_proj.weight".into()
            }
        );
        assert_eq!(
            map_tensor_name("gemma3n", "model.altup_projections.01.weight"),
            HfName::Unmapped
        );
        assert_eq!(
            map_tensor_name("gemma3n", "model.altup_projections.0.bias"),
            HfName::Unmapped
        );
        // Gemma 3n-only names mean nothing to Gemma 3, and vice versa no `_scale` fix-up.
        assert_eq!(
            g("gemma3", "model.layers.0.laurel.linear_left.weight"),
            None
        );
        assert_eq!(
            g("gemma3", "model.layers.0.altup.correct_output_scale"),
            None
        );
        assert_eq!(
            map_tensor_name("gemma3", "model.altup_projections.0.weight"),
            HfName::Unmapped
        );
        // Vision/audio towers stay unmapped.
        assert_eq!(
            g(
                "gemma3n",
                "model.audio_tower.subsample_conv_projection.input_proj_linear.weight"
            ),
            None
        );
    }

    #[test]
    fn experts() {
        assert_eq!(
            map_tensor_name(
                "llama",
                "model.layers.3.block_sparse_moe.experts.7.w2.weight"
            ),
            HfName::Expert {
                layer: 3,
                expert: 7,
                stacked: "blk.3.ffn_down_exps.weight".into()
            }
        );
        assert_eq!(
            map_tensor_name("qwen3moe", "model.layers.0.mlp.experts.1.gate_proj.weight"),
            HfName::Expert {
                layer: 0,
                expert: 1,
                stacked: "blk.0.ffn_gate_exps.weight".into()
            }
        );
        assert_eq!(
            g("qwen3moe", "model.layers.0.mlp.gate.weight").as_deref(),
            Some("blk.0.ffn_gate_inp.weight")
        );
    }
}
