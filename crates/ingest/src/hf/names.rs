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

/// Maps an HF tensor name of a model of GGUF architecture `arch`
/// (`"llama"`, `"qwen2"`, `"qwen3"`, `"qwen3moe"`, `"gemma3"`; mixtral is `"llama"`).
pub fn map_tensor_name(arch: &str, hf: &str) -> HfName {
    if !matches!(arch, "llama" | "qwen2" | "qwen3" | "qwen3moe" | "gemma3") {
        return HfName::Unmapped;
    }
    let hf = normalize(hf);
    let hf = hf.as_ref();
    let top = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "lm_head.weight" => Some("output.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        _ => None,
    };
    if let Some(g) = top {
        return HfName::Gguf(g.to_string());
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

    let gemma = arch == "gemma3";
    let g = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if gemma => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" if gemma => "ffn_norm",
        "post_feedforward_layernorm" if gemma => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" | "block_sparse_moe.gate" => "ffn_gate_inp",
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
        assert_eq!(g("phi3", "model.embed_tokens.weight"), None);
        assert_eq!(g("llama", "model.layers.0.mlp.up_proj.scales"), None);
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
