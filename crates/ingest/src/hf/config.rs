//! Hugging Face `config.json` → GGUF metadata keys.
//!
//! Mirrors what llama.cpp's `convert_hf_to_gguf.py` writes for each architecture
//! (`TextModel.set_gguf_parameters` plus the per-model overrides), so that an HF
//! directory and the GGUF converted from it carry the same `<arch>.*` keys and
//! values: counts as `UINT32`, rates and epsilons as `FLOAT32`. Keys whose config
//! field is absent are omitted, as the converter omits them. Tokenizer keys are not
//! derived here: the raw tokenizer files are [`crate::Source::assets`].

use crate::error::ConfigProblem;
use std::path::Path;

use serde_json::Value as Json;

use crate::error::Error;
use crate::value::{Array, Metadata, Value};

/// The GGUF architecture for an HF config: from `architectures[0]` as the converter
/// does, else from `model_type`. `None` for architectures we do not map.
pub fn gguf_architecture(config: &Json) -> Option<&'static str> {
    let by_class = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Json::as_str);
    let from_class = by_class.and_then(|c| {
        Some(match c {
            "LlamaForCausalLM" | "LlamaModel" | "MistralForCausalLM" | "MixtralForCausalLM" => {
                "llama"
            }
            "SmolLM3ForCausalLM" => "smollm3",
            "GraniteForCausalLM" => "granite",
            "Gemma2ForCausalLM" => "gemma2",
            "Olmo2ForCausalLM" => "olmo2",
            "Phi3ForCausalLM" => "phi3",
            "GptOssForCausalLM" => "gpt-oss",
            "DeepseekV2ForCausalLM" | "DeepseekV3ForCausalLM" | "Glm4MoeLiteForCausalLM" => {
                "deepseek2"
            }
            "Qwen2ForCausalLM" | "Qwen2Model" => "qwen2",
            "Qwen3ForCausalLM" | "Qwen3Model" => "qwen3",
            "Qwen3MoeForCausalLM" => "qwen3moe",
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => "gemma3",
            "Gemma3nForCausalLM" | "Gemma3nForConditionalGeneration" => "gemma3n",
            _ => return None,
        })
    });
    from_class.or_else(|| {
        Some(match config.get("model_type")?.as_str()? {
            "llama" | "mistral" | "mixtral" => "llama",
            "smollm3" => "smollm3",
            "granite" => "granite",
            "gemma2" => "gemma2",
            "olmo2" => "olmo2",
            "phi3" => "phi3",
            "gpt_oss" => "gpt-oss",
            "deepseek_v2" | "deepseek_v3" | "glm4_moe_lite" => "deepseek2",
            "qwen2" => "qwen2",
            "qwen3" => "qwen3",
            "qwen3_moe" => "qwen3moe",
            "gemma3" | "gemma3_text" => "gemma3",
            "gemma3n" | "gemma3n_text" => "gemma3n",
            _ => return None,
        })
    })
}

/// Hyper-parameter lookup: a multimodal config's `text_config` first, then the top level.
struct Hp<'a> {
    config: &'a Json,
    file: &'a Path,
}

impl<'a> Hp<'a> {
    fn raw(&self, key: &str) -> Option<&'a Json> {
        let v = self
            .config
            .get("text_config")
            .and_then(|t| t.get(key))
            .or_else(|| self.config.get(key))?;
        (!v.is_null()).then_some(v)
    }

    fn u32(&self, key: &'static str) -> Result<Option<u32>, Error> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .map(Some)
                .ok_or_else(|| Error::BadConfig {
                    file: self.file.to_path_buf(),
                    key,
                    problem: ConfigProblem::NotU32,
                }),
        }
    }

    fn f32(&self, key: &'static str) -> Result<Option<f32>, Error> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|v| Some(v as f32))
                .ok_or_else(|| Error::BadConfig {
                    file: self.file.to_path_buf(),
                    key,
                    problem: ConfigProblem::NotNumber,
                }),
        }
    }

    /// A JSON array (`None` when absent), else a `BadConfig` saying `problem`.
    fn array(
        &self,
        key: &'static str,
        problem: ConfigProblem,
    ) -> Result<Option<&'a [Json]>, Error> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(|a| Some(a.as_slice()))
                .ok_or_else(|| self.bad(key, problem)),
        }
    }

    fn bad(&self, key: &'static str, problem: ConfigProblem) -> Error {
        Error::BadConfig {
            file: self.file.to_path_buf(),
            key,
            problem,
        }
    }

    /// `rope_theta` at the top level (transformers < 5) or in `rope_parameters`
    /// (transformers 5), optionally for one layer type (`"full_attention"`).
    fn rope_theta(&self, layer_type: Option<&str>) -> Result<Option<f32>, Error> {
        let params = self.raw("rope_parameters");
        let nested = match layer_type {
            Some(t) => params.and_then(|p| p.get(t)),
            None => params,
        };
        let v = nested.and_then(|p| p.get("rope_theta")).or_else(|| {
            if layer_type.is_none() {
                self.raw("rope_theta")
            } else {
                None
            }
        });
        match v {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|v| Some(v as f32))
                .ok_or_else(|| Error::BadConfig {
                    file: self.file.to_path_buf(),
                    key: "rope_theta",
                    problem: ConfigProblem::NotNumber,
                }),
        }
    }
}

/// Builds GGUF-style metadata from a parsed `config.json` (`file` is used in errors).
///
/// Sets `general.architecture` (the GGUF name for known architectures, else the
/// config's `model_type`) and the `<arch>.*` hyper-parameter keys the converter writes.
pub fn config_to_metadata(config: &Json, file: &Path) -> Result<Metadata, Error> {
    let mut m = Metadata::new();
    let hp = Hp { config, file };
    let arch = match gguf_architecture(config) {
        Some(a) => a.to_string(),
        None => match hp.raw("model_type").and_then(Json::as_str) {
            Some(t) => t.to_string(),
            None => return Ok(m),
        },
    };
    m.insert("general.architecture", Value::String(arch.as_str().into()));
    let a = arch.as_str();
    if a == "gemma2" {
        gemma2_keys(&hp, &mut m)?;
        return Ok(m);
    }
    if a == "phi3" {
        phi3_keys(&hp, &mut m)?;
        return Ok(m);
    }
    let put_u32 = |m: &mut Metadata, key: &str, v: Option<u32>| {
        if let Some(v) = v {
            m.insert(format!("{a}.{key}"), Value::U32(v));
        }
    };
    // Gemma3NModel inherits Gemma3Model.set_gguf_parameters.
    let gemma = a == "gemma3" || a == "gemma3n";
    // Gemma3Model.set_gguf_parameters fills in defaults the config may leave out.
    let or = |v: Option<u32>, d: u32| if gemma { Some(v.unwrap_or(d)) } else { v };
    put_u32(&mut m, "block_count", hp.u32("num_hidden_layers")?);
    put_u32(
        &mut m,
        "context_length",
        or(hp.u32("max_position_embeddings")?, 131_072),
    );
    put_u32(&mut m, "embedding_length", hp.u32("hidden_size")?);
    if a == "gemma3n" && hp.raw("intermediate_size").is_some_and(Json::is_array) {
        // One size per layer: the converter writes the Python list as an INT32 array.
        let sizes = hp
            .array("intermediate_size", ConfigProblem::NotU31OrList)?
            .unwrap_or_default()
            .iter()
            .map(|v| v.as_u64().and_then(|v| i32::try_from(v).ok()))
            .collect::<Option<Vec<i32>>>()
            .ok_or_else(|| hp.bad("intermediate_size", ConfigProblem::NotU31OrList))?;
        m.insert(
            format!("{a}.feed_forward_length"),
            Value::Array(Array::I32(sizes)),
        );
    } else {
        put_u32(&mut m, "feed_forward_length", hp.u32("intermediate_size")?);
    }
    put_u32(
        &mut m,
        "attention.head_count",
        or(hp.u32("num_attention_heads")?, 8),
    );
    put_u32(
        &mut m,
        "attention.head_count_kv",
        or(hp.u32("num_key_value_heads")?, 4),
    );
    let put_f32 = |m: &mut Metadata, key: &str, v: Option<f32>| {
        if let Some(v) = v {
            m.insert(format!("{a}.{key}"), Value::F32(v));
        }
    };
    if gemma {
        // transformers 5: rope_parameters.{full,sliding}_attention; earlier:
        // rope_theta + rope_local_base_freq.
        let full = hp
            .rope_theta(Some("full_attention"))?
            .map_or_else(|| hp.rope_theta(None), |v| Ok(Some(v)))?;
        put_f32(&mut m, "rope.freq_base", Some(full.unwrap_or(1_000_000.0)));
        let swa = hp
            .rope_theta(Some("sliding_attention"))?
            .map_or_else(|| hp.f32("rope_local_base_freq"), |v| Ok(Some(v)))?;
        put_f32(&mut m, "rope.freq_base_swa", swa);
    } else {
        put_f32(&mut m, "rope.freq_base", hp.rope_theta(None)?);
    }
    rope_scaling(&hp, &mut m, a)?;
    let eps = hp.f32("rms_norm_eps")?;
    put_f32(
        &mut m,
        "attention.layer_norm_rms_epsilon",
        if gemma {
            Some(eps.unwrap_or(1e-6))
        } else {
            eps
        },
    );
    let experts = match hp.u32("num_local_experts")? {
        Some(n) => Some(n),
        None => hp.u32("num_experts")?,
    };
    put_u32(&mut m, "expert_count", experts);
    put_u32(&mut m, "expert_used_count", hp.u32("num_experts_per_tok")?);
    // GraniteModel.set_gguf_parameters drops `head_dim` (n_embd / n_head).
    let head_dim = match a {
        "granite" => None,
        _ => or(hp.u32("head_dim")?, 256),
    };
    put_u32(&mut m, "attention.key_length", head_dim);
    put_u32(&mut m, "attention.value_length", head_dim);
    if gemma {
        put_f32(
            &mut m,
            "final_logit_softcapping",
            hp.f32("final_logit_softcapping")?.filter(|&v| v != 0.0),
        );
        if hp.u32("sliding_window_pattern")? != Some(1) {
            put_u32(
                &mut m,
                "attention.sliding_window",
                hp.u32("sliding_window")?,
            );
        }
    }
    if a == "gemma3n" {
        gemma3n_keys(&hp, &mut m, a)?;
    }
    if a == "granite" {
        // Its `*_multiplier` / `logits_scaling` under llama.cpp's names.
        put_f32(&mut m, "attention.scale", hp.f32("attention_multiplier")?);
        put_f32(&mut m, "embedding_scale", hp.f32("embedding_multiplier")?);
        put_f32(&mut m, "residual_scale", hp.f32("residual_multiplier")?);
        put_f32(&mut m, "logit_scale", hp.f32("logits_scaling")?);
    }
    if super::names::llama_like(a) {
        put_u32(&mut m, "vocab_size", hp.u32("vocab_size")?);
        let rope_dim = match head_dim {
            Some(d) => Some(d),
            None => match (hp.u32("hidden_size")?, hp.u32("num_attention_heads")?) {
                (Some(h), Some(n)) if n > 0 => Some(h / n),
                _ => None,
            },
        };
        put_u32(&mut m, "rope.dimension_count", rope_dim);
    }
    if a == "qwen3moe" {
        put_u32(
            &mut m,
            "expert_feed_forward_length",
            hp.u32("moe_intermediate_size")?,
        );
    }
    if a == "deepseek2" {
        deepseek2_keys(&hp, &mut m, a)?;
    }
    if a == "gpt-oss" {
        // GptOssModel.set_gguf_parameters.
        put_u32(
            &mut m,
            "attention.sliding_window",
            hp.u32("sliding_window")?,
        );
        put_u32(
            &mut m,
            "expert_feed_forward_length",
            hp.u32("intermediate_size")?,
        );
    }
    Ok(m)
}

/// What `DeepseekV2Model.set_gguf_parameters` (and `TextModel`'s MoE keys)
/// writes over the common keys: MQA with one KV head of `kv_lora_rank +
/// qk_rope_head_dim`, the MLA head sizes, the MoE layout and routing, and
/// YaRN's `0.1 · mscale_all_dim`.
fn deepseek2_keys(hp: &Hp<'_>, m: &mut Metadata, a: &str) -> Result<(), Error> {
    let mut put = |key: &str, v: Value| {
        m.insert(format!("{a}.{key}"), v);
    };
    put("attention.head_count_kv", Value::U32(1));
    let eps = hp.f32("rms_norm_eps")?.unwrap_or(1e-6);
    put("attention.layer_norm_rms_epsilon", Value::F32(eps));
    let experts = hp.u32("n_routed_experts")?;
    let dense = match (hp.u32("first_k_dense_replace")?, experts) {
        (Some(k), _) => k,
        (None, None) => hp.u32("num_hidden_layers")?.unwrap_or(0),
        (None, Some(_)) => 0,
    };
    put("leading_dense_block_count", Value::U32(dense));
    // The MTP blocks after the trunk count in block_count where llama.cpp's
    // converter keeps them (Glm4MoeLiteModel; its DeepseekV2Model drops
    // DeepSeek-V3's); their tensors are mapped (`names::deepseek2_name`),
    // the runtime drafts with them.
    let keeps_mtp = hp.raw("model_type").and_then(Json::as_str) == Some("glm4_moe_lite");
    if let Some(n) = hp
        .u32("num_nextn_predict_layers")?
        .filter(|&n| n > 0 && keeps_mtp)
    {
        let trunk = hp.u32("num_hidden_layers")?.unwrap_or(0);
        put("block_count", Value::U32(trunk.saturating_add(n)));
        put("nextn_predict_layers", Value::U32(n));
    }
    if let Some(v) = hp.u32("vocab_size")? {
        put("vocab_size", Value::U32(v));
    }
    if let Some(q) = hp.u32("q_lora_rank")? {
        put("attention.q_lora_rank", Value::U32(q));
    }
    let kv_lora = hp.u32("kv_lora_rank")?.unwrap_or(512);
    let need = |key: &'static str, v: Option<u32>| {
        v.ok_or_else(|| hp.bad(key, ConfigProblem::MissingForMla))
    };
    let rope = need("qk_rope_head_dim", hp.u32("qk_rope_head_dim")?)?;
    let nope = need("qk_nope_head_dim", hp.u32("qk_nope_head_dim")?)?;
    let v_head = need("v_head_dim", hp.u32("v_head_dim")?)?;
    put("attention.kv_lora_rank", Value::U32(kv_lora));
    put("attention.key_length", Value::U32(kv_lora + rope));
    put("attention.value_length", Value::U32(kv_lora));
    put("attention.key_length_mla", Value::U32(nope + rope));
    put("attention.value_length_mla", Value::U32(v_head));
    let moe_ff = match hp.u32("moe_intermediate_size")? {
        Some(v) => Some(v),
        None => hp.u32("intermediate_size")?,
    };
    if let Some(v) = moe_ff {
        put("expert_feed_forward_length", Value::U32(v));
    }
    if let Some(n) = experts {
        put("expert_count", Value::U32(n));
    }
    put(
        "expert_shared_count",
        Value::U32(hp.u32("n_shared_experts")?.unwrap_or(0)),
    );
    if let Some(v) = hp.f32("routed_scaling_factor")? {
        put("expert_weights_scale", Value::F32(v));
    }
    if hp.raw("norm_topk_prob").and_then(Json::as_bool) == Some(true) {
        put("expert_weights_norm", Value::Bool(true));
    }
    if let Some(g) = hp.u32("n_group")? {
        put("expert_group_count", Value::U32(g));
    }
    if let Some(g) = hp.u32("topk_group")? {
        put("expert_group_used_count", Value::U32(g));
    }
    match hp.raw("scoring_func").and_then(Json::as_str) {
        Some("sigmoid") => put("expert_gating_func", Value::U32(2)),
        Some("softmax") => put("expert_gating_func", Value::U32(1)),
        _ => {}
    }
    put("rope.dimension_count", Value::U32(rope));
    let params = hp.raw("rope_parameters").or_else(|| hp.raw("rope_scaling"));
    if let Some(v) = params
        .and_then(|p| p.get("mscale_all_dim"))
        .and_then(Json::as_f64)
    {
        put(
            "rope.scaling.yarn_log_multiplier",
            Value::F32((0.1 * v) as f32),
        );
    }
    Ok(())
}

/// The keys `Gemma2Model.set_gguf_parameters` writes: its own list (it does
/// not call the base class's, so no RoPE base: llama.cpp's 10000 applies, as
/// transformers' default).
fn gemma2_keys(hp: &Hp<'_>, m: &mut Metadata) -> Result<(), Error> {
    for (json, key) in [
        ("max_position_embeddings", "context_length"),
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
        ("intermediate_size", "feed_forward_length"),
        ("num_attention_heads", "attention.head_count"),
        ("head_dim", "attention.key_length"),
        ("head_dim", "attention.value_length"),
        ("sliding_window", "attention.sliding_window"),
    ] {
        if let Some(v) = hp.u32(json)? {
            m.insert(format!("gemma2.{key}"), Value::U32(v));
        }
    }
    let kv = match hp.u32("num_key_value_heads")? {
        Some(v) => Some(v),
        None => hp.u32("num_attention_heads")?,
    };
    if let Some(v) = kv {
        m.insert("gemma2.attention.head_count_kv", Value::U32(v));
    }
    for (json, key) in [
        ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
        ("attn_logit_softcapping", "attn_logit_softcapping"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ] {
        if let Some(v) = hp.f32(json)? {
            m.insert(format!("gemma2.{key}"), Value::F32(v));
        }
    }
    Ok(())
}

/// Phi-3's `rope_parameters` (transformers 5) or `rope_scaling` object, if any.
fn phi3_rope<'a>(hp: &Hp<'a>) -> Option<&'a Json> {
    hp.raw("rope_parameters").or_else(|| hp.raw("rope_scaling"))
}

/// Rotated dims per head: `int(partial_rotary_factor · n_embd) // n_head`, as
/// `Phi3MiniModel` computes it.
fn phi3_rope_dims(hp: &Hp<'_>) -> Result<Option<u32>, Error> {
    let pct = phi3_rope(hp)
        .and_then(|r| r.get("partial_rotary_factor"))
        .and_then(Json::as_f64)
        .or(hp.f32("partial_rotary_factor")?.map(f64::from))
        .unwrap_or(1.0);
    Ok(
        match (hp.u32("hidden_size")?, hp.u32("num_attention_heads")?) {
            (Some(d), Some(h)) if h > 0 => Some(((pct * f64::from(d)) as u32) / h),
            _ => None,
        },
    )
}

/// The keys `Phi3MiniModel.set_gguf_parameters` writes (its own list), plus the
/// LongRoPE attention factor of `generate_extra_tensors`:
/// `sqrt(1 + ln(s) / ln(original))` for `s = max / original > 1`.
fn phi3_keys(hp: &Hp<'_>, m: &mut Metadata) -> Result<(), Error> {
    let put_u32 = |m: &mut Metadata, key: &str, v: Option<u32>| {
        if let Some(v) = v {
            m.insert(format!("phi3.{key}"), Value::U32(v));
        }
    };
    let orig = phi3_rope(hp)
        .and_then(|r| r.get("original_max_position_embeddings"))
        .and_then(Json::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .or(hp.u32("original_max_position_embeddings")?);
    let max = hp.u32("max_position_embeddings")?;
    put_u32(m, "context_length", max);
    put_u32(m, "rope.scaling.original_context_length", orig);
    put_u32(m, "embedding_length", hp.u32("hidden_size")?);
    put_u32(m, "feed_forward_length", hp.u32("intermediate_size")?);
    put_u32(m, "block_count", hp.u32("num_hidden_layers")?);
    put_u32(m, "attention.head_count", hp.u32("num_attention_heads")?);
    put_u32(m, "attention.head_count_kv", hp.u32("num_key_value_heads")?);
    if let Some(eps) = hp.f32("rms_norm_eps")? {
        m.insert("phi3.attention.layer_norm_rms_epsilon", Value::F32(eps));
    }
    put_u32(m, "rope.dimension_count", phi3_rope_dims(hp)?);
    let theta = phi3_rope(hp)
        .and_then(|r| r.get("full_attention").unwrap_or(r).get("rope_theta"))
        .and_then(Json::as_f64)
        .map(|v| v as f32)
        .or(hp.f32("rope_theta")?);
    if let Some(t) = theta {
        m.insert("phi3.rope.freq_base", Value::F32(t));
    }
    put_u32(
        m,
        "attention.sliding_window",
        Some(hp.u32("sliding_window")?.unwrap_or(0)),
    );
    if phi3_rope_factors(hp.config).is_some() {
        if let (Some(max), Some(orig)) = (max, orig.filter(|&o| o > 1)) {
            let scale = f64::from(max) / f64::from(orig);
            let f = if scale > 1.0 {
                (1.0 + scale.ln() / f64::from(orig).ln()).sqrt()
            } else {
                1.0
            };
            m.insert("phi3.rope.scaling.attn_factor", Value::F32(f as f32));
        }
    }
    Ok(())
}

/// Phi-3's LongRoPE factors `(long, short)` from its config (`long_factor`,
/// `short_factor`), as `Phi3MiniModel.generate_extra_tensors` writes them
/// (`rope_factors_long.weight`, `rope_factors_short.weight`, f32), or None
/// when the config has none or they are not `rope.dimension_count / 2` long.
pub fn phi3_rope_factors(config: &Json) -> Option<(Vec<f32>, Vec<f32>)> {
    let hp = Hp {
        config,
        file: Path::new(""),
    };
    let r = phi3_rope(&hp)?;
    let list = |k: &str| -> Option<Vec<f32>> {
        r.get(k)?
            .as_array()?
            .iter()
            .map(|v| v.as_f64().map(|v| v as f32))
            .collect()
    };
    let (long, short) = (list("long_factor")?, list("short_factor")?);
    let half = phi3_rope_dims(&hp).ok()?? as usize / 2;
    (long.len() == half && short.len() == half && half > 0).then_some((long, short))
}

/// The keys `Gemma3NModel.set_gguf_parameters` adds to Gemma 3's: AltUp, per-layer
/// inputs, KV sharing, the activation-sparsity scales (the standard normal quantile of
/// each layer's sparsity, see [`normal_icdf_f32`]) and the per-layer sliding-window
/// flags from `layer_types`. Absent config fields are omitted (the converter would fail).
fn gemma3n_keys(hp: &Hp<'_>, m: &mut Metadata, a: &str) -> Result<(), Error> {
    for (json, key) in [
        ("altup_active_idx", "altup.active_idx"),
        ("altup_num_inputs", "altup.num_inputs"),
        (
            "hidden_size_per_layer_input",
            "embedding_length_per_layer_input",
        ),
        ("num_kv_shared_layers", "attention.shared_kv_layers"),
    ] {
        if let Some(v) = hp.u32(json)? {
            m.insert(format!("{a}.{key}"), Value::U32(v));
        }
    }
    let sparsity = ConfigProblem::NotProbabilities;
    if let Some(ps) = hp.array("activation_sparsity_pattern", sparsity)? {
        let scales = ps
            .iter()
            .map(|p| {
                p.as_f64()
                    .map(|p| p as f32)
                    .filter(|p| (0.0..=1.0).contains(p))
                    .map(normal_icdf_f32)
            })
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| hp.bad("activation_sparsity_pattern", sparsity))?;
        m.insert(
            format!("{a}.activation_sparsity_scale"),
            Value::Array(Array::F32(scales)),
        );
    }
    let types = ConfigProblem::NotStrings;
    if let Some(ts) = hp.array("layer_types", types)? {
        let sliding = ts
            .iter()
            .map(|t| t.as_str().map(|t| t == "sliding_attention"))
            .collect::<Option<Vec<bool>>>()
            .ok_or_else(|| hp.bad("layer_types", types))?;
        m.insert(
            format!("{a}.attention.sliding_window_pattern"),
            Value::Array(Array::Bool(sliding)),
        );
    }
    Ok(())
}

/// The number of rows llama.cpp's converter pads Gemma 3n's `token_embd` and
/// `per_layer_token_embd` to (`Gemma3NModel.modify_tensors`): config.json's
/// `vocab_size`, 262 400 when absent. Smaller tensors get zero rows appended.
pub(crate) fn gemma3n_vocab_rows(config: &Json, file: &Path) -> Result<u64, Error> {
    let hp = Hp { config, file };
    Ok(hp.u32("vocab_size")?.map_or(262_400, u64::from))
}

/// The standard normal quantile of `p` exactly as the converter computes it in
/// float32 with torch: `Normal(0, 1).icdf(p)` = `erfinv(2p − 1) · √2`, where
/// `2p − 1` is rounded to f32, `erfinv` gives the f32 nearest the true value and
/// the product is an f32 multiplication by `√2` rounded to f32. `p = 0` gives −∞,
/// `p = 1` +∞.
///
/// torch's f32 `erfinv` (a rational guess and two Newton steps in f32) is within an
/// ulp of the correctly rounded value; on the inputs that matter (0.95 in released
/// Gemma 3n configs, 0) it is the correctly rounded value, checked bit for bit
/// against llama.cpp's output. Elsewhere it may differ by 1 ulp.
pub fn normal_icdf_f32(p: f32) -> f32 {
    let y = 2.0f32 * p - 1.0;
    erfinv_f32(y) * std::f32::consts::SQRT_2
}

/// `erfinv(y)` for an f32 `y`, rounded to f32 from an f64 evaluation accurate to
/// about 1e-16 (NaN outside [−1, 1], ±∞ at ±1).
fn erfinv_f32(y: f32) -> f32 {
    if y.is_nan() || y.abs() > 1.0 {
        return f32::NAN;
    }
    if y.abs() == 1.0 {
        return f32::INFINITY.copysign(y);
    }
    // erfinv(y) = Φ⁻¹((y + 1) / 2) / √2, with Φ⁻¹ by Wichura's AS241 (PPND16) written
    // in terms of q = p − 0.5 = y / 2 and, in the tails, r = min(p, 1 − p) =
    // (1 − |y|) / 2, which are exact in f64 for an f32 y.
    let y = f64::from(y);
    let q = y / 2.0;
    let poly = |c: &[f64], x: f64| c.iter().rev().fold(0.0, |acc, &k| acc * x + k);
    let x = if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        q * poly(&as241::A, r) / poly(&as241::B, r)
    } else {
        let r = (-((1.0 - y.abs()) / 2.0).ln()).sqrt();
        let x = if r <= 5.0 {
            let r = r - 1.6;
            poly(&as241::C, r) / poly(&as241::D, r)
        } else {
            let r = r - 5.0;
            poly(&as241::E, r) / poly(&as241::F, r)
        };
        x.copysign(q)
    };
    (x / std::f64::consts::SQRT_2) as f32
}

/// Wichura's AS241 (PPND16) coefficients, lowest degree first, with the published
/// digits (Applied Statistics 37(3), 1988): `A/B` for |p − 0.5| ≤ 0.425, `C/D` for
/// r = √−ln(min(p, 1 − p)) ≤ 5, `E/F` beyond.
#[allow(clippy::excessive_precision)]
mod as241 {
    pub(super) const A: [f64; 8] = [
        3.387_132_872_796_366_608,
        1.331_416_678_917_843_774_5e2,
        1.971_590_950_306_551_442_7e3,
        1.373_169_376_550_946_112_5e4,
        4.592_195_393_154_987_145_7e4,
        6.726_577_092_700_870_085_3e4,
        3.343_057_558_358_812_810_5e4,
        2.509_080_928_730_122_672_7e3,
    ];
    pub(super) const B: [f64; 8] = [
        1.0,
        4.231_333_070_160_091_125_2e1,
        6.871_870_074_920_579_083e2,
        5.394_196_021_424_751_107_7e3,
        2.121_379_430_158_659_586_7e4,
        3.930_789_580_009_271_061e4,
        2.872_908_573_572_194_267_4e4,
        5.226_495_278_852_854_561e3,
    ];
    pub(super) const C: [f64; 8] = [
        1.423_437_110_749_683_577_34,
        4.630_337_846_156_545_295_9,
        5.769_497_221_460_691_405_5,
        3.647_848_324_763_204_605_04,
        1.270_458_252_452_368_382_58,
        2.417_807_251_774_506_117_7e-1,
        2.272_384_498_926_918_458_33e-2,
        7.745_450_142_783_414_076_4e-4,
    ];
    pub(super) const D: [f64; 8] = [
        1.0,
        2.053_191_626_637_758_821_87,
        1.676_384_830_183_803_849_4,
        6.897_673_349_851_000_045_5e-1,
        1.481_039_764_274_800_745_9e-1,
        1.519_866_656_361_645_719_66e-2,
        5.475_938_084_995_344_946e-4,
        1.050_750_071_644_416_843_24e-9,
    ];
    pub(super) const E: [f64; 8] = [
        6.657_904_643_501_103_777_2,
        5.463_784_911_164_114_369_9,
        1.784_826_539_917_291_335_8,
        2.965_605_718_285_048_912_3e-1,
        2.653_218_952_657_612_309_3e-2,
        1.242_660_947_388_078_438_6e-3,
        2.711_555_568_743_487_578_15e-5,
        2.010_334_399_292_288_132_65e-7,
    ];
    pub(super) const F: [f64; 8] = [
        1.0,
        5.998_322_065_558_879_376_9e-1,
        1.369_298_809_227_358_053_1e-1,
        1.487_536_129_085_061_485_25e-2,
        7.868_691_311_456_132_591e-4,
        1.846_318_317_510_054_681_8e-5,
        1.421_511_758_316_445_888_7e-7,
        2.044_263_103_389_939_785_64e-15,
    ];
}

/// `<arch>.rope.scaling.*` from `rope_parameters` (transformers 5) or `rope_scaling`
/// (earlier), as `TextModel.set_gguf_parameters` writes them: linear and YaRN with
/// their factors, LongRoPE as a type only. Llama 3's `rope_type: "llama3"` becomes a
/// `rope_freqs.weight` tensor in the converter, which is not generated here.
fn rope_scaling(hp: &Hp<'_>, m: &mut Metadata, a: &str) -> Result<(), Error> {
    let Some(params) = hp.raw("rope_parameters").or_else(|| hp.raw("rope_scaling")) else {
        return Ok(());
    };
    let params = params.get("full_attention").unwrap_or(params);
    let kind = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Json::as_str);
    let num = |k: &str| params.get(k).and_then(Json::as_f64).map(|v| v as f32);
    let factor = num("factor");
    let mut put = |k: &str, v: Value| {
        m.insert(format!("{a}.rope.scaling.{k}"), v);
    };
    match (kind, factor) {
        (Some("linear"), Some(f)) => {
            put("type", Value::String("linear".into()));
            put("factor", Value::F32(f));
        }
        (Some("yarn"), Some(f)) => {
            put("type", Value::String("yarn".into()));
            put("factor", Value::F32(f));
            let orig = params
                .get("original_max_position_embeddings")
                .and_then(Json::as_u64);
            let orig =
                orig.and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| Error::BadConfig {
                        file: hp.file.to_path_buf(),
                        key: "original_max_position_embeddings",
                        problem: ConfigProblem::YarnOriginal,
                    })?;
            put("original_context_length", Value::U32(orig));
            for (json, key) in [
                ("extrapolation_factor", "yarn_ext_factor"),
                ("attention_factor", "yarn_attn_factor"),
                ("attn_factor", "yarn_attn_factor"),
                ("beta_fast", "yarn_beta_fast"),
                ("beta_slow", "yarn_beta_slow"),
            ] {
                if let Some(v) = num(json) {
                    put(key, Value::F32(v));
                }
            }
        }
        (Some("su" | "longrope"), _) => put("type", Value::String("longrope".into())),
        _ => {}
    }
    Ok(())
}

/// The `rope_freqs.weight` values llama.cpp's converter generates for Llama 3.x
/// (`rope_type: "llama3"`, `LlamaModel.generate_extra_tensors`): one factor per
/// rotary frequency pair, 1 for short wavelengths, `factor` for long ones and a
/// smooth blend between. Computed in f32 like the converter's torch code; `powf`
/// may differ from torch's in the last bit. `None` when the config is not llama3 RoPE.
pub fn llama3_rope_factors(config: &Json) -> Option<Vec<f32>> {
    let hp = Hp {
        config,
        file: Path::new(""),
    };
    let params = hp
        .raw("rope_parameters")
        .or_else(|| hp.raw("rope_scaling"))?;
    let params = params.get("full_attention").unwrap_or(params);
    let kind = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Json::as_str)?;
    if !kind.eq_ignore_ascii_case("llama3") {
        return None;
    }
    let num = |k: &str, d: f64| params.get(k).and_then(Json::as_f64).unwrap_or(d);
    let base = params
        .get("rope_theta")
        .or_else(|| hp.raw("rope_theta"))
        .and_then(Json::as_f64)
        .unwrap_or(10_000.0);
    let dim = match hp.u32("head_dim").ok().flatten() {
        Some(d) => d,
        None => hp.u32("hidden_size").ok()?? / hp.u32("num_attention_heads").ok()??.max(1),
    };
    if dim == 0 || dim > 1 << 16 {
        return None;
    }
    let factor = num("factor", 8.0) as f32;
    let (low, high) = (num("low_freq_factor", 1.0), num("high_freq_factor", 4.0));
    let old_ctx = num("original_max_position_embeddings", 8192.0);
    let (low_wavelen, high_wavelen) = ((old_ctx / low) as f32, (old_ctx / high) as f32);
    let (low, high, old_ctx) = (low as f32, high as f32, old_ctx as f32);
    let two_pi = std::f64::consts::TAU as f32;
    Some(
        (0..dim)
            .step_by(2)
            .map(|i| {
                let freq = 1.0 / (base as f32).powf(i as f32 / dim as f32);
                let wavelen = two_pi / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor
                } else {
                    let smooth = (old_ctx / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_types_are_errors_and_nulls_are_absent() {
        let c: Json = serde_json::json!({"model_type": "qwen2", "hidden_size": -1});
        assert!(matches!(
            config_to_metadata(&c, Path::new("c")),
            Err(Error::BadConfig {
                key: "hidden_size",
                ..
            })
        ));
        let c: Json =
            serde_json::json!({"model_type": "qwen2", "head_dim": null, "rope_theta": 5.0});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("general.architecture"), Some("qwen2"));
        assert_eq!(m.get("qwen2.attention.key_length"), None);
        assert_eq!(m.get_f32("qwen2.rope.freq_base"), Some(5.0));
    }

    #[test]
    fn rope_scaling_keys() {
        let c: Json = serde_json::json!({"model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 32768, "beta_fast": 32.0}});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("qwen2.rope.scaling.type"), Some("yarn"));
        assert_eq!(m.get_f32("qwen2.rope.scaling.factor"), Some(4.0));
        assert_eq!(
            m.get_u32("qwen2.rope.scaling.original_context_length"),
            Some(32768)
        );
        assert_eq!(m.get_f32("qwen2.rope.scaling.yarn_beta_fast"), Some(32.0));
        let c: Json = serde_json::json!({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("llama.rope.scaling.type"), Some("linear"));
        assert_eq!(m.get_f32("llama.rope.freq_base"), Some(5e5));
        let c: Json = serde_json::json!({"model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0}});
        assert!(matches!(
            config_to_metadata(&c, Path::new("c")),
            Err(Error::BadConfig { .. })
        ));
    }

    #[test]
    fn llama3_rope_factors_match_numpy_f32() {
        // Llama 3.2 1B's rope parameters; expected bits from numpy float32.
        let c: Json = serde_json::json!({"model_type": "llama", "head_dim": 64, "rope_scaling": {"rope_type": "llama3",
            "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            "rope_theta": 500000.0});
        let f = llama3_rope_factors(&c).unwrap();
        assert_eq!(f.len(), 32);
        assert!(f[..15].iter().all(|&v| v == 1.0));
        assert_eq!(
            [f[15].to_bits(), f[16].to_bits(), f[17].to_bits()],
            [0x3fd35ec2, 0x4052b46f, 0x411aaaee]
        );
        assert!(f[18..].iter().all(|&v| v == 32.0));
        let c: Json = serde_json::json!({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}});
        assert_eq!(llama3_rope_factors(&c), None);
    }

    #[test]
    fn gemma3_defaults() {
        let c: Json = serde_json::json!({"model_type": "gemma3_text", "sliding_window": 512, "final_logit_softcapping": 30.0});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_u32("gemma3.context_length"), Some(131_072));
        assert_eq!(m.get_u32("gemma3.attention.key_length"), Some(256));
        assert_eq!(m.get_u32("gemma3.attention.head_count_kv"), Some(4));
        assert_eq!(m.get_f32("gemma3.rope.freq_base"), Some(1e6));
        assert_eq!(m.get_f32("gemma3.final_logit_softcapping"), Some(30.0));
        assert_eq!(m.get_u32("gemma3.attention.sliding_window"), Some(512));
    }

    #[test]
    fn normal_icdf_matches_torch_f32() {
        // llama.cpp's converter writes torch's Normal(0, 1).icdf(p) in float32 as
        // gemma3n.activation_sparsity_scale; 0.95 → 0x3fd28a90 (1.6448536) in the
        // tiny fixture's GGUF, while the correctly rounded quantile is 0x3fd28a8f:
        // the f32 erfinv and the f32 multiplication by √2 both round.
        assert_eq!(normal_icdf_f32(0.95).to_bits(), 0x3fd2_8a90);
        assert_eq!(normal_icdf_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(normal_icdf_f32(1.0), f32::INFINITY);
        assert_eq!(normal_icdf_f32(0.5), 0.0);
        assert!(normal_icdf_f32(1.5).is_nan());
        assert!(normal_icdf_f32(f32::NAN).is_nan());
        // Symmetric, and the tails and centre of the rational approximation:
        // expected bits from float32(float32(Φ⁻¹((y + 1) / 2) / √2) · float32(√2)).
        assert_eq!(
            normal_icdf_f32(0.05).to_bits(),
            normal_icdf_f32(0.95).to_bits() | 0x8000_0000
        );
        for (p, bits) in [
            (0.75f32, 0x3f2c_ab5cu32),
            (0.99, 0x4014_e2e4),
            (0.001, 0xc045_c66e),
            (0.999_999, 0x4098_0635),
        ] {
            assert_eq!(normal_icdf_f32(p).to_bits(), bits, "{p}");
        }
    }

    #[test]
    fn gemma3n_keys_and_types() {
        let c: Json = serde_json::json!({"architectures": ["Gemma3nForConditionalGeneration"],
            "model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text", "num_hidden_layers": 3,
            "intermediate_size": [128, 256, 128], "altup_active_idx": 0, "altup_num_inputs": 4,
            "hidden_size_per_layer_input": 32, "num_kv_shared_layers": 1,
            "activation_sparsity_pattern": [0.95, 0.0, 0.0],
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "rope_theta": 1e6, "rope_local_base_freq": 1e4, "sliding_window": 512}});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("general.architecture"), Some("gemma3n"));
        assert_eq!(
            m.get("gemma3n.feed_forward_length"),
            Some(&Value::Array(Array::I32(vec![128, 256, 128])))
        );
        assert_eq!(m.get_u32("gemma3n.altup.active_idx"), Some(0));
        assert_eq!(m.get_u32("gemma3n.altup.num_inputs"), Some(4));
        assert_eq!(
            m.get_u32("gemma3n.embedding_length_per_layer_input"),
            Some(32)
        );
        assert_eq!(m.get_u32("gemma3n.attention.shared_kv_layers"), Some(1));
        assert_eq!(
            m.get_f32_array("gemma3n.activation_sparsity_scale"),
            Some(&[normal_icdf_f32(0.95), f32::NEG_INFINITY, f32::NEG_INFINITY][..])
        );
        assert_eq!(
            m.get("gemma3n.attention.sliding_window_pattern"),
            Some(&Value::Array(Array::Bool(vec![true, true, false])))
        );
        assert_eq!(m.get_f32("gemma3n.rope.freq_base"), Some(1e6));
        assert_eq!(m.get_f32("gemma3n.rope.freq_base_swa"), Some(1e4));
        assert_eq!(m.get_u32("gemma3n.attention.sliding_window"), Some(512));
        // Gemma 3 defaults apply (Gemma3NModel extends Gemma3Model).
        assert_eq!(m.get_u32("gemma3n.attention.key_length"), Some(256));
        assert_eq!(m.get_u32("gemma3n.context_length"), Some(131_072));
        // A scalar intermediate_size stays a UINT32.
        let c: Json = serde_json::json!({"model_type": "gemma3n_text", "intermediate_size": 8192});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_u32("gemma3n.feed_forward_length"), Some(8192));
        assert_eq!(m.get("gemma3n.activation_sparsity_scale"), None);
        for bad in [
            serde_json::json!({"model_type": "gemma3n_text", "intermediate_size": [1, -1]}),
            serde_json::json!({"model_type": "gemma3n_text", "activation_sparsity_pattern": [1.5]}),
            serde_json::json!({"model_type": "gemma3n_text", "activation_sparsity_pattern": 0.95}),
            serde_json::json!({"model_type": "gemma3n_text", "layer_types": [1]}),
        ] {
            assert!(
                matches!(
                    config_to_metadata(&bad, Path::new("c")),
                    Err(Error::BadConfig { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn unknown_arch_keeps_model_type() {
        let c: Json = serde_json::json!({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_hidden_layers": 3});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("general.architecture"), Some("phi3"));
        assert_eq!(m.get_u32("phi3.block_count"), Some(3));
    }
}
