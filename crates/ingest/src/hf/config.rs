//! Hugging Face `config.json` → GGUF metadata keys.
//!
//! Mirrors what llama.cpp's `convert_hf_to_gguf.py` writes for each architecture
//! (`TextModel.set_gguf_parameters` plus the per-model overrides), so that an HF
//! directory and the GGUF converted from it carry the same `<arch>.*` keys and
//! values: counts as `UINT32`, rates and epsilons as `FLOAT32`. Keys whose config
//! field is absent are omitted, as the converter omits them. Tokenizer keys are not
//! derived here: the raw tokenizer files are [`crate::Source::assets`].

use std::path::Path;

use serde_json::Value as Json;

use crate::error::Error;
use crate::value::{Metadata, Value};

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
            "Qwen2ForCausalLM" | "Qwen2Model" => "qwen2",
            "Qwen3ForCausalLM" | "Qwen3Model" => "qwen3",
            "Qwen3MoeForCausalLM" => "qwen3moe",
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => "gemma3",
            _ => return None,
        })
    });
    from_class.or_else(|| {
        Some(match config.get("model_type")?.as_str()? {
            "llama" | "mistral" | "mixtral" => "llama",
            "qwen2" => "qwen2",
            "qwen3" => "qwen3",
            "qwen3_moe" => "qwen3moe",
            "gemma3" | "gemma3_text" => "gemma3",
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
                    problem: "must be an unsigned integer below 2^32",
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
                    problem: "must be a number",
                }),
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
                    problem: "must be a number",
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
    let put_u32 = |m: &mut Metadata, key: &str, v: Option<u32>| {
        if let Some(v) = v {
            m.insert(format!("{a}.{key}"), Value::U32(v));
        }
    };
    let gemma = a == "gemma3";
    // Gemma3Model.set_gguf_parameters fills in defaults the config may leave out.
    let or = |v: Option<u32>, d: u32| if gemma { Some(v.unwrap_or(d)) } else { v };
    put_u32(&mut m, "block_count", hp.u32("num_hidden_layers")?);
    put_u32(
        &mut m,
        "context_length",
        or(hp.u32("max_position_embeddings")?, 131_072),
    );
    put_u32(&mut m, "embedding_length", hp.u32("hidden_size")?);
    put_u32(&mut m, "feed_forward_length", hp.u32("intermediate_size")?);
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
    let head_dim = or(hp.u32("head_dim")?, 256);
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
    if a == "llama" {
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
    Ok(m)
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
            let orig = orig.and_then(|v| u32::try_from(v).ok()).ok_or_else(|| Error::BadConfig {
                file: hp.file.to_path_buf(),
                key: "original_max_position_embeddings",
                problem: "is needed for YaRN rope scaling and must be an unsigned integer below 2^32",
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
    fn unknown_arch_keeps_model_type() {
        let c: Json = serde_json::json!({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_hidden_layers": 3});
        let m = config_to_metadata(&c, Path::new("c")).unwrap();
        assert_eq!(m.get_str("general.architecture"), Some("phi3"));
        assert_eq!(m.get_u32("phi3.block_count"), Some(3));
    }
}
