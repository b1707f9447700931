//! Hyperparameters, read from GGUF-style metadata keys through
//! [`MetadataSource`], so every provider supplies them the same way.
//!
//! Conventions follow llama.cpp (`src/llama-model.cpp`, `llm_load_hparams`
//! and `llama_model_rope_type`; `src/llama-hparams.cpp`):
//! * rope type: LLM_ARCH_LLAMA uses `LLAMA_ROPE_TYPE_NORM` (rotate adjacent
//!   pairs — GGUF's converter permutes q/k rows so this equals HF's
//!   rotate-half); QWEN2, QWEN3 and GEMMA3 use `LLAMA_ROPE_TYPE_NEOX`
//!   (rotate the two halves of each head).
//! * gemma3: embeddings scaled by `sqrt(n_embd)`; attention scale
//!   `1/sqrt(head_dim)` (`query_pre_attn_scalar` = head_dim for the released
//!   sizes but 27B); sliding-window layers are `il % 6 < 5`
//!   (`hparams.set_swa_pattern(6)`) with base `rope.freq_base_swa`, and the
//!   window masks positions with `p_query - p_key >= n_swa`
//!   (`is_masked_swa`, LLAMA_SWA_TYPE_STANDARD) — the same as HF's
//!   `q_idx - kv_idx < sliding_window`; linear rope scaling applies to the
//!   global layers only.

use crate::error::{Error, Result};
use crate::weights::MetadataSource;

/// The most experts a token may be routed to (`expert_used_count`).
pub const MAX_EXPERT_USED: usize = 64;

/// The most expert groups a router may rank (`expert_group_count`;
/// DeepSeek-V2/V3 use 8).
pub const MAX_EXPERT_GROUPS: usize = 64;

/// A model family with its own graph details.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM2, Mistral-style dense models.
    Llama,
    /// Qwen2 / Qwen2.5 (q/k/v biases).
    Qwen2,
    /// Qwen3 (per-head q/k RMS norms).
    Qwen3,
    /// Gemma 3 (GeGLU, pre/post norms, embedding scaling, sliding window).
    Gemma3,
    /// Qwen3-MoE (Qwen3 attention, routed experts in every layer).
    Qwen3Moe,
    /// Gemma 3n text (AltUp streams, Laurel, per-layer embeddings from the
    /// PLE table, KV sharing, activation sparsity; see `gemma3n.rs`).
    Gemma3n,
    /// SmolLM3 (llama with RoPE skipped on every 4th layer).
    Smollm3,
    /// Granite 3 (llama with embedding, attention, residual and logit
    /// multipliers).
    Granite,
    /// Gemma 2 (Gemma 3's block without q/k norms; attention-logit and
    /// final soft-capping; every other layer sliding-window).
    Gemma2,
    /// OLMo 2 (post-norm blocks; q and k RMS norms over all heads).
    Olmo2,
    /// Phi-3 / Phi-3.5 / Phi-4-mini (fused q‖k‖v and gate‖up tensors,
    /// partial rotary, LongRoPE factors).
    Phi3,
    /// gpt-oss (routed experts with biases and a clamped SwiGLU, attention
    /// sinks, every other layer sliding-window, YaRN).
    GptOss,
    /// DeepSeek-V2/V3 (multi-head latent attention with a compressed KV
    /// cache, shared + routed experts with grouped top-k routing, leading
    /// dense layers; see `model/mla.rs`).
    Deepseek2,
}

/// What sets a family's graph apart, one row per [`Arch`] in [`FAMILIES`]:
/// a llama-like family is a row here, not a branch in the graph (which
/// reads only [`Config`]).
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The family.
    pub arch: Arch,
    /// `general.architecture` (and the metadata key prefix).
    pub name: &'static str,
    /// How RoPE pairs dimensions (llama.cpp's `llama_model_rope_type`).
    pub rope_style: RopeStyle,
    /// The gated FFN's activation.
    pub activation: Activation,
    /// Embeddings multiplied by `sqrt(n_embd)` (Gemma).
    pub embed_sqrt: bool,
    /// Every `n`-th layer (counting from 1) skips RoPE (SmolLM3's NoPE
    /// layers; llama.cpp's `n_no_rope_layer_step`).
    pub no_rope_every: Option<usize>,
    /// Reads Granite's multipliers: `embedding_scale`, `attention.scale`,
    /// `residual_scale`, `logit_scale`.
    pub multipliers: bool,
    /// With a sliding window: layers come in periods of this many, all but
    /// the last of each sliding (llama.cpp's `set_swa_pattern`; Gemma 3: 6,
    /// Gemma 2: 2), unless `attention.sliding_window_pattern` says
    /// otherwise.
    pub swa_period: Option<usize>,
    /// Post-norm blocks: no input norms, the attention and FFN outputs
    /// normalized before they join the residual (OLMo 2).
    pub post_norm: bool,
    /// q and k RMS norms over all heads together, not per head (OLMo 2).
    pub qk_norm_all_heads: bool,
    /// LongRoPE: frequency factors from `rope_factors_short.weight` and
    /// cos/sin scaled by `rope.scaling.attn_factor` (Phi-3).
    pub longrope: bool,
    /// How the router picks and weighs experts.
    pub gating: Gating,
    /// The GGUF name of the pre-FFN norm: `ffn_norm` (gpt-oss's converter
    /// names it `post_attention_norm`, after HF's `post_attention_layernorm`).
    pub ffn_norm: &'static str,
    /// YaRN's correction range taken as computed, not widened to whole
    /// dimensions (transformers' `truncate: false`: gpt-oss).
    pub yarn_exact_range: bool,
}

/// How a router's logits become expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts, the `k` largest, their weights divided by
    /// their sum (Qwen3-MoE, Mixtral).
    SoftmaxTopK,
    /// The `k` largest logits, softmax over those `k` (gpt-oss: llama.cpp's
    /// `LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT`).
    TopKSoftmax,
    /// Sigmoid of each logit, the `k` largest (after the selection bias
    /// `exp_probs_b`, if any) weighted by their sigmoid (DeepSeek-V3:
    /// `expert_gating_func` 2).
    Sigmoid,
}

/// How a MoE layer turns router scores into the chosen experts' weights
/// (read from the family and the metadata; transformers' routers and
/// llama.cpp's `build_moe_ffn`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Routing {
    /// Scores from logits, and how the weights are taken.
    pub gating: Gating,
    /// The chosen weights divided by their sum ([`Gating::SoftmaxTopK`] of
    /// Qwen3-MoE and Mixtral; DeepSeek's `expert_weights_norm`).
    pub norm: bool,
    /// Multiplier of the weights (`expert_weights_scale`, DeepSeek's
    /// `routed_scaling_factor`; 1 when absent).
    pub scale: f32,
    /// `(groups, groups kept)`: experts come in equal groups, only the
    /// best `groups kept` groups are eligible (`expert_group_count`,
    /// `expert_group_used_count`). A group's score is its best expert's
    /// (transformers' DeepSeek-V2 `group_limited_greedy`) under softmax
    /// gating, the sum of its two best (DeepSeek-V3 `noaux_tc`, llama.cpp's
    /// rule for every model) under sigmoid gating.
    pub groups: Option<(usize, usize)>,
}

/// Multi-head latent attention's sizes (DeepSeek-V2/V3; llama.cpp's
/// `n_lora_q`, `n_lora_kv`, `n_embd_head_k_mla`, `n_embd_head_v_mla`). The
/// model is read as llama.cpp's converter writes it: MQA with one KV head of
/// [`Config::head_dim`] = `kv_lora_rank + n_rot` (the normalized latent,
/// then the rotated shared key) whose first `kv_lora_rank` values are also
/// the value ([`Config::head_dim_v`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mla {
    /// Rank of the query compression (0: a plain `attn_q`, as V2-Lite).
    pub q_lora_rank: usize,
    /// Width of the cached latent.
    pub kv_lora_rank: usize,
    /// Per-head query/key width before absorption (`key_length_mla`: the
    /// no-rope part plus [`Config::n_rot`]).
    pub head_dim_k: usize,
    /// Per-head value width after `attn_v_b` (`value_length_mla`).
    pub head_dim_v: usize,
}

impl Mla {
    /// Per-head query dims without rotation (`qk_nope_head_dim`).
    pub fn nope(&self, n_rot: usize) -> usize {
        self.head_dim_k - n_rot
    }
}

const fn family(arch: Arch, name: &'static str, rope_style: RopeStyle) -> Family {
    Family {
        arch,
        name,
        rope_style,
        activation: Activation::Silu,
        embed_sqrt: false,
        no_rope_every: None,
        multipliers: false,
        swa_period: None,
        post_norm: false,
        qk_norm_all_heads: false,
        longrope: false,
        gating: Gating::SoftmaxTopK,
        ffn_norm: "ffn_norm.weight",
        yarn_exact_range: false,
    }
}

/// Every supported family.
pub const FAMILIES: &[Family] = &[
    family(Arch::Llama, "llama", RopeStyle::Normal),
    family(Arch::Qwen2, "qwen2", RopeStyle::Neox),
    family(Arch::Qwen3, "qwen3", RopeStyle::Neox),
    Family {
        activation: Activation::GeluTanh,
        embed_sqrt: true,
        swa_period: Some(6),
        ..family(Arch::Gemma3, "gemma3", RopeStyle::Neox)
    },
    family(Arch::Qwen3Moe, "qwen3moe", RopeStyle::Neox),
    Family {
        activation: Activation::GeluTanh,
        embed_sqrt: true,
        ..family(Arch::Gemma3n, "gemma3n", RopeStyle::Neox)
    },
    Family {
        no_rope_every: Some(4),
        ..family(Arch::Smollm3, "smollm3", RopeStyle::Normal)
    },
    Family {
        multipliers: true,
        ..family(Arch::Granite, "granite", RopeStyle::Normal)
    },
    Family {
        activation: Activation::GeluTanh,
        embed_sqrt: true,
        swa_period: Some(2),
        ..family(Arch::Gemma2, "gemma2", RopeStyle::Neox)
    },
    Family {
        post_norm: true,
        qk_norm_all_heads: true,
        ..family(Arch::Olmo2, "olmo2", RopeStyle::Neox)
    },
    Family {
        longrope: true,
        ..family(Arch::Phi3, "phi3", RopeStyle::Neox)
    },
    Family {
        activation: Activation::SwigluOai,
        swa_period: Some(2),
        gating: Gating::TopKSoftmax,
        ffn_norm: "post_attention_norm.weight",
        yarn_exact_range: true,
        ..family(Arch::GptOss, "gpt-oss", RopeStyle::Neox)
    },
    family(Arch::Deepseek2, "deepseek2", RopeStyle::Normal),
];

impl Arch {
    /// From `general.architecture`.
    pub fn from_name(name: &str) -> Option<Arch> {
        FAMILIES.iter().find(|f| f.name == name).map(|f| f.arch)
    }
    /// The family's row of [`FAMILIES`].
    pub fn family(self) -> &'static Family {
        // Every variant has a row (checked by a test).
        FAMILIES
            .iter()
            .find(|f| f.arch == self)
            .unwrap_or(&FAMILIES[0])
    }
    /// The `general.architecture` name (metadata key prefix).
    pub fn name(self) -> &'static str {
        self.family().name
    }
}

/// How rotary embeddings pair the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// ggml `LLAMA_ROPE_TYPE_NORM`: pairs `(x[2i], x[2i+1])`.
    Normal,
    /// ggml `LLAMA_ROPE_TYPE_NEOX`: pairs `(x[i], x[i + n_rot/2])`.
    Neox,
}

/// The feed-forward activation of the gated FFN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// GeGLU with the tanh approximation of GELU (`gelu_pytorch_tanh`).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g = min(g, 7)`, `u = clamp(u, ±7)`,
    /// `(u + 1) · g · sigmoid(1.702 · g)` (transformers' `GptOssExperts`,
    /// llama.cpp's `ggml_swiglu_oai` with alpha 1.702 and limit 7).
    SwigluOai,
}

/// gpt-oss's SwiGLU alpha and clamp limit (fixed by the architecture).
pub const SWIGLU_OAI: (f32, f32) = (1.702, 7.0);

/// YaRN RoPE scaling (transformers' `_compute_yarn_parameters`, ggml's
/// `rope_yarn`): frequencies blended between interpolated (divided by
/// `factor`) and original across a ramp of dimensions, cos/sin scaled by
/// `attn_factor`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// Context extension factor (`rope.scaling.factor`).
    pub factor: f32,
    /// The original context (`rope.scaling.original_context_length`).
    pub n_ctx_orig: usize,
    /// Rotations at the fast end of the ramp (default 32).
    pub beta_fast: f32,
    /// Rotations at the slow end of the ramp (default 1).
    pub beta_slow: f32,
    /// Multiplier of cos and sin (`rope.scaling.yarn_attn_factor`, else
    /// `0.1 · ln(factor) + 1`).
    pub attn_factor: f32,
    /// The ramp's ends used as computed rather than floored/ceiled.
    pub exact_range: bool,
}

/// Everything the graph needs besides the tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Architecture.
    pub arch: Arch,
    /// Residual width (`embedding_length`).
    pub n_embd: usize,
    /// Number of blocks of the trunk (`block_count` less the MTP blocks).
    pub n_layer: usize,
    /// Multi-token-prediction blocks stored after the trunk's
    /// (`nextn_predict_layers`: GLM-4.5, GLM-4.7-Flash, DeepSeek-V3.2 as
    /// llama.cpp converts them): blocks `n_layer .. n_layer + n_nextn`, run
    /// only as a draft source ([`crate::Mtp`]), never by the trunk.
    pub n_nextn: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when < n_head).
    pub n_head_kv: usize,
    /// Per-head q/k width (`attention.key_length`, default n_embd / n_head).
    pub head_dim: usize,
    /// Per-head v width (`attention.value_length`, default head_dim).
    pub head_dim_v: usize,
    /// FFN width.
    pub n_ff: usize,
    /// Vocabulary size (rows of the output head).
    pub n_vocab: usize,
    /// Training context (`context_length`).
    pub n_ctx_train: usize,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// Rotated dims per head (`rope.dimension_count`, default head_dim).
    pub n_rot: usize,
    /// RoPE base of global layers.
    pub rope_base: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_swa: f32,
    /// Position multiplier of global layers (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// Pair layout of the rotation.
    pub rope_style: RopeStyle,
    /// Sliding window (positions a query sees, itself included), if any.
    pub sliding_window: Option<usize>,
    /// Which layers use the sliding window (`true` = SWA layer).
    pub swa_layers: Vec<bool>,
    /// Scale of q·k (default `1/sqrt(head_dim)`).
    pub attn_scale: f32,
    /// `cap * tanh(x / cap)` on attention scores, if configured.
    pub attn_softcap: Option<f32>,
    /// `cap * tanh(x / cap)` on the final logits, if configured.
    pub final_softcap: Option<f32>,
    /// Multiplier of the token embedding (gemma: sqrt(n_embd); granite:
    /// `embedding_scale`).
    pub embed_scale: Option<f32>,
    /// Multiplier of each block's attention and FFN output before it joins
    /// the residual stream (granite: `residual_scale`).
    pub residual_scale: Option<f32>,
    /// Divisor of the logits (granite: `logit_scale`).
    pub logit_scale: Option<f32>,
    /// Per layer: whether q and k are rotated (SmolLM3 skips every 4th).
    pub rope_layers: Vec<bool>,
    /// Multiplier of RoPE's cos and sin (LongRoPE's attention factor, else 1).
    pub rope_attn_factor: f32,
    /// The context the RoPE factors were trained for
    /// (`rope.scaling.original_context_length`, else `context_length`):
    /// LongRoPE's long factors apply beyond it.
    pub n_ctx_orig: usize,
    /// YaRN scaling of every layer's RoPE, if configured.
    pub yarn: Option<Yarn>,
    /// FFN activation.
    pub activation: Activation,
    /// Routed experts per MoE layer (0: a dense model). Mixtral is `llama`
    /// with `llama.expert_count`; Qwen3-MoE is `qwen3moe`.
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`).
    pub n_expert_used: usize,
    /// Hidden width of one expert (`expert_feed_forward_length`, else
    /// `feed_forward_length`, as llama.cpp reads it for Mixtral).
    pub n_ff_exp: usize,
    /// How routers weigh experts.
    pub routing: Routing,
    /// Shared experts run on every token beside the routed ones, as one
    /// FFN of width `n_ff_exp · n_expert_shared` (`expert_shared_count`).
    pub n_expert_shared: usize,
    /// Leading layers with a dense FFN of width `n_ff` before the MoE
    /// layers (`leading_dense_block_count`).
    pub n_dense_lead: usize,
    /// Multi-head latent attention, if the model uses it.
    pub mla: Option<Mla>,
    /// Gemma 3n's extra hyperparameters.
    pub gemma3n: Option<Gemma3nConfig>,
}

/// Gemma 3n hyperparameters (llama.cpp `LLM_ARCH_GEMMA3N`; transformers
/// `Gemma3nTextConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3nConfig {
    /// Width of one layer's per-layer input (`embedding_length_per_layer_input`).
    pub n_embd_per_layer: usize,
    /// AltUp streams (`altup.num_inputs`).
    pub n_altup: usize,
    /// The stream the layers compute on (`altup.active_idx`).
    pub altup_active: usize,
    /// Per layer: the layer whose K/V cache it attends over (itself, or for
    /// the last `attention.shared_kv_layers` layers the last non-shared
    /// layer of the same kind, sliding or global, as transformers'
    /// `kv_sharing_modes` defines it).
    pub kv_source: Vec<usize>,
    /// Per layer: the gaussian top-k multiplier `icdf(sparsity)` of the FFN
    /// gate (`activation_sparsity_scale`), `None` for dense layers.
    pub sparsity: Vec<Option<f32>>,
}

/// Upper bounds on the sizes a file's metadata may declare, checked before
/// any of them sizes an allocation or enters a product (the largest real
/// models are far below: 126 layers, 16 Ki wide, contexts of a few
/// million positions).
const MAX_LAYERS: usize = gpack_ingest::MAX_LAYERS as usize;
const MAX_WIDTH: usize = 1 << 20;
const MAX_HEADS: usize = 4096;
const MAX_HEAD_DIM: usize = 4096;
const MAX_CONTEXT: usize = 1 << 26;

/// `v` when `1 <= v <= max`, else the hyperparameter error naming `what`.
fn bounded(what: &'static str, v: u64, max: usize) -> Result<usize> {
    if v == 0 || v > max as u64 {
        return Err(Error::Hparam { what, value: v });
    }
    Ok(v as usize)
}

/// A required size key, bounded as [`bounded`].
fn get_dim(m: &dyn MetadataSource, key: String, what: &'static str, max: usize) -> Result<usize> {
    let v = m.meta_u64(&key).ok_or(Error::Metadata {
        key,
        what: "integer",
    })?;
    bounded(what, v, max)
}

/// An optional size key (`default` when absent), bounded as [`bounded`].
fn opt_dim(
    m: &dyn MetadataSource,
    key: String,
    default: usize,
    what: &'static str,
    max: usize,
) -> Result<usize> {
    match m.meta_u64(&key) {
        Some(v) => bounded(what, v, max),
        None => Ok(default),
    }
}

fn gemma3n_config(m: &dyn MetadataSource, n_layer: usize, swa: &[bool]) -> Result<Gemma3nConfig> {
    let k = |s: &str| format!("gemma3n.{s}");
    let n_embd_per_layer = get_dim(
        m,
        k("embedding_length_per_layer_input"),
        "embedding_length_per_layer_input",
        MAX_WIDTH,
    )?;
    let n_altup = m.meta_u64(&k("altup.num_inputs")).map_or(4, |v| v as usize);
    let altup_active = m.meta_u64(&k("altup.active_idx")).map_or(0, |v| v as usize);
    if !(2..=16).contains(&n_altup) || altup_active != 0 {
        return Err(Error::Hparam {
            what: "altup.num_inputs / altup.active_idx (2..=16 streams, active 0)",
            value: n_altup as u64,
        });
    }
    let shared = m
        .meta_u64(&k("attention.shared_kv_layers"))
        .map_or(0, |v| v as usize);
    if shared >= n_layer {
        return Err(Error::Hparam {
            what: "attention.shared_kv_layers",
            value: shared as u64,
        });
    }
    let first_shared = n_layer - shared;
    let mut kv_source = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        if l < first_shared {
            kv_source.push(l);
        } else {
            let src = (0..first_shared).rev().find(|&j| swa[j] == swa[l]);
            kv_source.push(src.ok_or(Error::Hparam {
                what: "attention.shared_kv_layers (no earlier layer of the same kind)",
                value: shared as u64,
            })?);
        }
    }
    let sparsity = match m.meta_num_array(&k("activation_sparsity_scale")) {
        Some(v) if v.len() == n_layer => v
            .iter()
            .map(|&x| (x.is_finite()).then_some(x as f32))
            .collect(),
        Some(v) => {
            return Err(Error::Hparam {
                what: "activation_sparsity_scale (one value per layer)",
                value: v.len() as u64,
            })
        }
        None => vec![None; n_layer],
    };
    Ok(Gemma3nConfig {
        n_embd_per_layer,
        n_altup,
        altup_active,
        kv_source,
        sparsity,
    })
}

/// MLA's sizes of a `deepseek2` file, checked against the MQA shape
/// llama.cpp's converter writes (one KV head of `kv_lora_rank + n_rot`, the
/// value its first `kv_lora_rank`).
fn mla_dims(
    m: &dyn MetadataSource,
    a: &str,
    n_head_kv: usize,
    head_dim: usize,
    head_dim_v: usize,
    n_rot: usize,
) -> Result<Mla> {
    let k = |s: &str| format!("{a}.{s}");
    let kv_lora_rank = get_dim(
        m,
        k("attention.kv_lora_rank"),
        "attention.kv_lora_rank",
        MAX_HEAD_DIM,
    )?;
    // Files converted before llama.cpp split `attn_kv_b` (no `*_mla`
    // lengths) keep per-head K/V: not supported.
    let head_dim_k = get_dim(
        m,
        k("attention.key_length_mla"),
        "attention.key_length_mla",
        MAX_HEAD_DIM,
    )?;
    let head_dim_v_mla = get_dim(
        m,
        k("attention.value_length_mla"),
        "attention.value_length_mla",
        MAX_HEAD_DIM,
    )?;
    let q_lora_rank = m
        .meta_u64(&k("attention.q_lora_rank"))
        .map_or(Ok(0), |v| bounded("attention.q_lora_rank", v, MAX_WIDTH))?;
    let shape_ok = n_head_kv == 1
        && head_dim == kv_lora_rank + n_rot
        && head_dim_v == kv_lora_rank
        && head_dim_k > n_rot;
    if !shape_ok {
        return Err(Error::Hparam {
            what: "attention.key_length / value_length / head_count_kv (MLA: one KV head of \
                   kv_lora_rank + rope.dimension_count, value kv_lora_rank, key_length_mla \
                   above rope.dimension_count)",
            value: head_dim as u64,
        });
    }
    Ok(Mla {
        q_lora_rank,
        kv_lora_rank,
        head_dim_k,
        head_dim_v: head_dim_v_mla,
    })
}

/// The routing of `arch`'s MoE layers: the family's gating, DeepSeek's
/// `expert_gating_func`, weight normalization, scale and expert groups.
/// Vocabulary size of GLM-4.7-Flash, whose GGUFs (llama.cpp's converter,
/// deepseek2 architecture) carry no `expert_gating_func` although its
/// router is a sigmoid: llama.cpp's loader recognizes it by this and its
/// 47 (48 with the MTP block) layers; so do we.
const GLM47_FLASH_VOCAB: usize = 154_880;

fn routing(
    m: &dyn MetadataSource,
    a: &str,
    arch: Arch,
    n_expert: usize,
    (n_layer, n_vocab): (usize, usize),
) -> Result<Routing> {
    let k = |s: &str| format!("{a}.{s}");
    let fam = arch.family();
    let deepseek = arch == Arch::Deepseek2;
    let glm47_flash = n_vocab == GLM47_FLASH_VOCAB && (n_layer == 47 || n_layer == 48);
    let gating = match (deepseek, m.meta_u64(&k("expert_gating_func"))) {
        (true, None) if glm47_flash => Gating::Sigmoid,
        (false, _) | (true, None | Some(0 | 1)) => fam.gating,
        (true, Some(2)) => Gating::Sigmoid,
        (true, Some(v)) => {
            return Err(Error::Hparam {
                what: "expert_gating_func (1 softmax, 2 sigmoid)",
                value: v,
            })
        }
    };
    let norm = match deepseek {
        true => m.meta_bool(&k("expert_weights_norm")).unwrap_or(false),
        false => gating == Gating::SoftmaxTopK,
    };
    let scale = match m.meta_f32(&k("expert_weights_scale")) {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            return Err(Error::Hparam {
                what: "expert_weights_scale",
                value: v.to_bits() as u64,
            })
        }
        Some(v) => v,
        None => 1.0,
    };
    let groups = match (
        m.meta_u64(&k("expert_group_count")),
        m.meta_u64(&k("expert_group_used_count")),
    ) {
        (Some(g), Some(used)) if g > 1 => {
            // The kept groups must hold at least `expert_used_count` experts.
            let per_group = n_expert as u64 / g;
            let n_used = m.meta_u64(&k("expert_used_count")).unwrap_or(0);
            let ok = g <= MAX_EXPERT_GROUPS as u64
                && (n_expert as u64).is_multiple_of(g)
                && (1..=g).contains(&used)
                && per_group.saturating_mul(used) >= n_used;
            if !ok {
                return Err(Error::Hparam {
                    what: "expert_group_count / expert_group_used_count",
                    value: g,
                });
            }
            Some((g as usize, used as usize))
        }
        _ => None,
    };
    Ok(Routing {
        gating,
        norm,
        scale,
        groups,
    })
}

fn get_f(m: &dyn MetadataSource, key: String) -> Result<f32> {
    m.meta_f32(&key)
        .ok_or(Error::Metadata { key, what: "float" })
}

impl Config {
    /// The family's features this model uses, one short phrase each, in a
    /// fixed order (`gpack inspect`, `gpack run --verbose`).
    pub fn features(&self) -> Vec<String> {
        let mut f = vec![format!(
            "{} blocks, width {}, vocabulary {}",
            self.n_layer, self.n_embd, self.n_vocab
        )];
        f.push(if let Some(m) = &self.mla {
            format!(
                "multi-head latent attention: {} heads of {} (q·k) / {} (v), {}cached per position: a latent of {} and {} rotated key dims",
                self.n_head,
                m.head_dim_k,
                m.head_dim_v,
                match m.q_lora_rank {
                    0 => String::new(),
                    r => format!("queries through a rank-{r} projection, "),
                },
                m.kv_lora_rank,
                self.n_rot
            )
        } else if self.n_head_kv < self.n_head {
            format!(
                "grouped-query attention: {} query / {} KV heads of {}",
                self.n_head, self.n_head_kv, self.head_dim
            )
        } else {
            format!(
                "multi-head attention: {} heads of {}",
                self.n_head, self.head_dim
            )
        });
        let style = match self.rope_style {
            RopeStyle::Normal => "normal",
            RopeStyle::Neox => "neox",
        };
        let mut rope = format!("RoPE ({style} pairs), base {}", self.rope_base);
        if self.n_rot < self.head_dim && self.mla.is_none() {
            rope.push_str(&format!(
                ", {} of {} dims rotated",
                self.n_rot, self.head_dim
            ));
        }
        if self.rope_freq_scale != 1.0 {
            rope.push_str(&format!(", linear scaling {}", 1.0 / self.rope_freq_scale));
        }
        if self.arch.family().longrope {
            rope.push_str(&format!(
                ", LongRoPE (long factors past {} positions, attention factor {})",
                self.n_ctx_orig, self.rope_attn_factor
            ));
        }
        if let Some(y) = &self.yarn {
            rope.push_str(&format!(
                ", YaRN x{} over an original {} positions (attention factor {})",
                y.factor, y.n_ctx_orig, y.attn_factor
            ));
        }
        let nope = self.rope_layers.iter().filter(|&&r| !r).count();
        if nope > 0 {
            rope.push_str(&format!(", skipped on {nope} of {} layers", self.n_layer));
        }
        f.push(rope);
        if let Some(w) = self.sliding_window {
            let n = self.swa_layers.iter().filter(|&&b| b).count();
            let mut s = format!("sliding window of {w} on {n} of {} layers", self.n_layer);
            if self.rope_base_swa != self.rope_base {
                s.push_str(&format!(" (RoPE base {} there)", self.rope_base_swa));
            }
            f.push(s);
        }
        if let Some(c) = self.attn_softcap {
            f.push(format!("attention soft-cap {c}"));
        }
        if let Some(c) = self.final_softcap {
            f.push(format!("final-logit soft-cap {c}"));
        }
        if let Some(e) = self.embed_scale {
            f.push(format!("embeddings scaled by {e}"));
        }
        if self.arch.family().multipliers {
            f.push(format!("attention scale {}", self.attn_scale));
        }
        if let Some(r) = self.residual_scale {
            f.push(format!("block outputs scaled by {r} into the residual"));
        }
        if let Some(l) = self.logit_scale {
            f.push(format!("logits divided by {l}"));
        }
        let fam = self.arch.family();
        if fam.post_norm {
            f.push("post-norm blocks (outputs normalized before the residual)".into());
        }
        if fam.qk_norm_all_heads {
            f.push("q/k RMS norms over all heads".into());
        }
        let act = match self.activation {
            Activation::Silu => "SwiGLU",
            Activation::GeluTanh => "GeGLU (tanh GELU)",
            Activation::SwigluOai => "clamped SwiGLU (alpha 1.702, limit 7)",
        };
        f.push(if self.n_expert > 0 {
            let r = &self.routing;
            let mut e = format!(
                "{act} experts: {} routed, {} per token, width {}, {}",
                self.n_expert,
                self.n_expert_used,
                self.n_ff_exp,
                match r.gating {
                    Gating::SoftmaxTopK => "softmax gating",
                    Gating::TopKSoftmax => "softmax over the chosen",
                    Gating::Sigmoid => "sigmoid gating",
                }
            );
            if r.gating != Gating::TopKSoftmax {
                e.push_str(match r.norm {
                    true => ", weights renormalized",
                    false => ", weights not renormalized",
                });
            }
            if r.scale != 1.0 {
                e.push_str(&format!(", scaled by {}", r.scale));
            }
            if let Some((g, used)) = r.groups {
                e.push_str(&format!(", from the best {used} of {g} expert groups"));
            }
            if self.n_expert_shared > 0 {
                e.push_str(&format!(", plus {} shared", self.n_expert_shared));
            }
            if self.n_dense_lead > 0 {
                e.push_str(&format!(
                    "; the first {} layers dense, width {}",
                    self.n_dense_lead, self.n_ff
                ));
            }
            e
        } else {
            format!("{act} feed-forward, width {}", self.n_ff)
        });
        if self.n_nextn > 0 {
            f.push(format!(
                "{} multi-token-prediction block{} after the {} layers (drafts for --spec mtp)",
                self.n_nextn,
                if self.n_nextn == 1 { "" } else { "s" },
                self.n_layer
            ));
        }
        if let Some(g) = &self.gemma3n {
            let shared = g
                .kv_source
                .iter()
                .enumerate()
                .filter(|(i, &s)| *i != s)
                .count();
            f.push(format!(
                "per-layer embeddings of {}, {} AltUp streams, {} layers sharing another's KV cache",
                g.n_embd_per_layer, g.n_altup, shared
            ));
        }
        f
    }

    /// Reads the hyperparameters. `n_vocab` is given by the caller (rows of the
    /// embedding), as not every file has `<arch>.vocab_size`.
    pub fn from_metadata(m: &dyn MetadataSource, n_vocab: usize) -> Result<Config> {
        let arch_name = m.meta_str("general.architecture").ok_or(Error::Metadata {
            key: "general.architecture".into(),
            what: "string",
        })?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| Error::Architecture {
            arch: arch_name.into(),
        })?;
        let a = arch.name();
        let k = |s: &str| format!("{a}.{s}");
        let n_embd = get_dim(m, k("embedding_length"), "embedding_length", MAX_WIDTH)?;
        let block_count = get_dim(m, k("block_count"), "block_count", MAX_LAYERS)?;
        // MTP blocks count in block_count (llama.cpp's n_layer_all) but are
        // not part of the trunk.
        let n_nextn = match m.meta_u64(&k("nextn_predict_layers")) {
            Some(v) if v >= block_count as u64 => {
                return Err(Error::Hparam {
                    what: "nextn_predict_layers",
                    value: v,
                })
            }
            Some(v) => v as usize,
            None => 0,
        };
        let n_layer = block_count - n_nextn;
        let n_head = get_dim(
            m,
            k("attention.head_count"),
            "attention.head_count",
            MAX_HEADS,
        )?;
        let n_head_kv = opt_dim(
            m,
            k("attention.head_count_kv"),
            n_head,
            "attention.head_count_kv",
            MAX_HEADS,
        )?;
        if n_head % n_head_kv != 0 {
            return Err(Error::Hparam {
                what: "attention.head_count_kv",
                value: n_head_kv as u64,
            });
        }
        let head_dim = opt_dim(
            m,
            k("attention.key_length"),
            n_embd / n_head,
            "attention.key_length",
            MAX_HEAD_DIM,
        )?;
        let head_dim_v = opt_dim(
            m,
            k("attention.value_length"),
            head_dim,
            "attention.value_length",
            MAX_HEAD_DIM,
        )?;
        if head_dim == 0 {
            return Err(Error::Hparam {
                what: "attention.key_length (embedding_length / head_count is 0)",
                value: 0,
            });
        }
        let n_ff = match m.meta_num_array(&k("feed_forward_length")) {
            // Per-layer widths (gemma3n writes an array): one width for all.
            Some(v) => match v.first() {
                Some(&f) if v.iter().all(|&x| x == f) && f >= 1.0 && f <= MAX_WIDTH as f64 => {
                    f as usize
                }
                _ => {
                    return Err(Error::Hparam {
                        what: "feed_forward_length (per-layer widths must be equal)",
                        value: v.len() as u64,
                    })
                }
            },
            None => get_dim(
                m,
                k("feed_forward_length"),
                "feed_forward_length",
                MAX_WIDTH,
            )?,
        };
        let n_ctx_train = opt_dim(m, k("context_length"), 2048, "context_length", MAX_CONTEXT)?;
        let rms_eps = get_f(m, k("attention.layer_norm_rms_epsilon"))?;
        let n_rot = opt_dim(
            m,
            k("rope.dimension_count"),
            head_dim,
            "rope.dimension_count",
            MAX_HEAD_DIM,
        )?;
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(Error::Hparam {
                what: "rope.dimension_count",
                value: n_rot as u64,
            });
        }
        let rope_base = m.meta_f32(&k("rope.freq_base")).unwrap_or(10000.0);
        let rope_base_swa = m.meta_f32(&k("rope.freq_base_swa")).unwrap_or(match arch {
            Arch::Gemma3 | Arch::Gemma3n => 10000.0,
            _ => rope_base,
        });
        let scaling_type = m.meta_str(&k("rope.scaling.type"));
        let rope_freq_scale = match (scaling_type, m.meta_f32(&k("rope.scaling.factor"))) {
            (Some("linear"), Some(f)) if f > 0.0 => 1.0 / f,
            _ => 1.0,
        };
        // The context LongRoPE's and YaRN's factors were trained for
        // (llama.cpp's default: the training context).
        let n_ctx_orig = opt_dim(
            m,
            k("rope.scaling.original_context_length"),
            n_ctx_train,
            "rope.scaling.original_context_length",
            MAX_CONTEXT,
        )?;
        let yarn = match (scaling_type, m.meta_f32(&k("rope.scaling.factor"))) {
            (Some("yarn"), Some(factor)) => {
                let bad = |what: &'static str, v: f32| Error::Hparam {
                    what,
                    value: v.to_bits() as u64,
                };
                if !(factor.is_finite() && factor >= 1.0) {
                    return Err(bad("rope.scaling.factor (YaRN: at least 1)", factor));
                }
                let f = |key: &str, default: f32| -> Result<f32> {
                    match m.meta_f32(&k(key)) {
                        Some(v) if !(v.is_finite() && v > 0.0) => {
                            Err(bad("rope.scaling YaRN parameter", v))
                        }
                        v => Ok(v.unwrap_or(default)),
                    }
                };
                Some(Yarn {
                    factor,
                    n_ctx_orig,
                    beta_fast: f("rope.scaling.yarn_beta_fast", 32.0)?,
                    beta_slow: f("rope.scaling.yarn_beta_slow", 1.0)?,
                    attn_factor: f("rope.scaling.yarn_attn_factor", 0.1 * factor.ln() + 1.0)?,
                    exact_range: arch.family().yarn_exact_range,
                })
            }
            _ => None,
        };
        let sliding_window = m
            .meta_u64(&k("attention.sliding_window"))
            .map(|v| v as usize)
            .filter(|&w| w > 0);
        let fam = arch.family();
        let swa_layers = match (arch, sliding_window) {
            (Arch::Gemma3n, Some(_)) => {
                match m.meta_num_array(&k("attention.sliding_window_pattern")) {
                    Some(v) if v.len() == n_layer => v.iter().map(|&x| x != 0.0).collect(),
                    // llama.cpp's default for gemma3n: 4 sliding, 1 global.
                    _ => (0..n_layer).map(|il| il % 5 < 4).collect(),
                }
            }
            (_, Some(_)) if fam.swa_period.is_some() => {
                let period = m
                    .meta_u64(&k("attention.sliding_window_pattern"))
                    .map_or(fam.swa_period.unwrap_or(1), |v| v as usize)
                    .max(1);
                (0..n_layer).map(|il| il % period < period - 1).collect()
            }
            _ => vec![false; n_layer],
        };
        let rope_style = fam.rope_style;
        let rope_layers = (0..n_layer)
            .map(|l| fam.no_rope_every.is_none_or(|n| (l + 1) % n != 0))
            .collect();
        let n_expert = m.meta_u64(&k("expert_count")).map_or(0, |v| v as usize);
        let n_expert_used = m
            .meta_u64(&k("expert_used_count"))
            .map_or(0, |v| v as usize);
        if n_expert > 0 && !(1..=n_expert.min(MAX_EXPERT_USED)).contains(&n_expert_used) {
            return Err(Error::Hparam {
                what: "expert_used_count",
                value: n_expert_used as u64,
            });
        }
        if arch == Arch::Qwen3Moe && n_expert == 0 {
            return Err(Error::Metadata {
                key: k("expert_count"),
                what: "integer",
            });
        }
        let n_ff_exp = m
            .meta_u64(&k("expert_feed_forward_length"))
            .map_or(n_ff, |v| v as usize);
        let activation = fam.activation;
        let rope_attn_factor = match fam.longrope {
            true => match m.meta_f32(&k("rope.scaling.attn_factor")) {
                Some(f) if !(f.is_finite() && f > 0.0) => {
                    return Err(Error::Hparam {
                        what: "rope.scaling.attn_factor",
                        value: f.to_bits() as u64,
                    })
                }
                f => f.unwrap_or(1.0),
            },
            false => 1.0,
        };
        // Granite's multipliers (absent or 0: none, as llama.cpp reads them).
        let multiplier = |key: &'static str| -> Result<Option<f32>> {
            match fam.multipliers.then(|| m.meta_f32(&k(key))).flatten() {
                Some(v) if !v.is_finite() => Err(Error::Hparam {
                    what: key,
                    value: v.to_bits() as u64,
                }),
                v => Ok(v.filter(|&v| v != 0.0)),
            }
        };
        let embed_scale = if fam.embed_sqrt {
            Some((n_embd as f32).sqrt())
        } else {
            multiplier("embedding_scale")?
        };
        // Gemma 3n normalizes q and k per head instead (scaling = 1.0);
        // Gemma 2 27B (46 layers) scales by the width per head, not
        // head_dim (llama.cpp `llama_model_gemma2::load_arch_hparams`, from
        // its `query_pre_attn_scalar`).
        let attn_scale = if arch == Arch::Gemma3n {
            1.0
        } else if arch == Arch::Gemma2 && n_layer == 46 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            multiplier("attention.scale")?.unwrap_or(1.0 / (head_dim as f32).sqrt())
        };
        let gemma3n = if arch == Arch::Gemma3n {
            Some(gemma3n_config(m, n_layer, &swa_layers)?)
        } else {
            None
        };
        let mla = match arch {
            Arch::Deepseek2 => Some(mla_dims(m, a, n_head_kv, head_dim, head_dim_v, n_rot)?),
            _ => None,
        };
        // DeepSeek's YaRN (transformers' `yarn_apply_mscale`, llama.cpp's
        // deepseek2 graph): the softmax scale is `1/sqrt(key_length_mla)`
        // times `mscale²`, `mscale = 1 + 0.1 · mscale_all_dim · ln(factor)`
        // (`yarn_log_multiplier` is `0.1 · mscale_all_dim`), and cos/sin are
        // not scaled (transformers: `mscale / mscale_all_dim` = 1 for every
        // released model; llama.cpp cancels its own factor).
        let mut yarn = yarn;
        let mut attn_scale = attn_scale;
        if let Some(mla) = &mla {
            attn_scale = 1.0 / (mla.head_dim_k as f32).sqrt();
            if let (Some(y), Some(mul)) = (
                yarn.as_mut(),
                m.meta_f32(&k("rope.scaling.yarn_log_multiplier")),
            ) {
                if !mul.is_finite() {
                    return Err(Error::Hparam {
                        what: "rope.scaling.yarn_log_multiplier",
                        value: mul.to_bits() as u64,
                    });
                }
                let mscale = 1.0 + mul * y.factor.ln();
                attn_scale *= mscale * mscale;
                if m.meta_f32(&k("rope.scaling.yarn_attn_factor")).is_none() {
                    y.attn_factor = 1.0;
                }
            }
        }
        let routing = routing(m, a, arch, n_expert, (n_layer, n_vocab))?;
        let n_expert_shared = match m.meta_u64(&k("expert_shared_count")) {
            Some(v) if v > MAX_EXPERT_USED as u64 => {
                return Err(Error::Hparam {
                    what: "expert_shared_count",
                    value: v,
                })
            }
            Some(v) if n_expert > 0 => v as usize,
            _ => 0,
        };
        let n_dense_lead = m
            .meta_u64(&k("leading_dense_block_count"))
            .map_or(0, |v| v as usize);
        if n_dense_lead > n_layer {
            return Err(Error::Hparam {
                what: "leading_dense_block_count",
                value: n_dense_lead as u64,
            });
        }
        let softcap = |s: &str| m.meta_f32(&k(s)).filter(|&c| c > 0.0);
        Ok(Config {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_ff,
            n_vocab,
            n_ctx_train,
            rms_eps,
            n_rot,
            rope_base,
            rope_base_swa,
            rope_freq_scale,
            rope_style,
            sliding_window,
            swa_layers,
            attn_scale,
            attn_softcap: softcap("attn_logit_softcapping"),
            final_softcap: softcap("final_logit_softcapping"),
            embed_scale,
            residual_scale: multiplier("residual_scale")?,
            logit_scale: multiplier("logit_scale")?,
            rope_layers,
            rope_attn_factor,
            n_ctx_orig,
            yarn,
            activation,
            n_expert,
            n_expert_used,
            n_ff_exp,
            routing,
            n_expert_shared,
            n_dense_lead,
            n_nextn,
            mla,
            gemma3n,
        })
    }

    /// Width of all query heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    /// Width of all key heads (one cache row).
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    /// Width of all value heads.
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Meta(HashMap<&'static str, &'static str>);
    impl MetadataSource for Meta {
        fn meta_u64(&self, k: &str) -> Option<u64> {
            self.0.get(k)?.parse().ok()
        }
        fn meta_f32(&self, k: &str) -> Option<f32> {
            self.0.get(k)?.parse().ok()
        }
        fn meta_str(&self, k: &str) -> Option<&str> {
            self.0.get(k).copied()
        }
        fn meta_bool(&self, k: &str) -> Option<bool> {
            self.0.get(k)?.parse().ok()
        }
    }

    fn gemma(extra: &[(&'static str, &'static str)]) -> Meta {
        let mut m: HashMap<_, _> = [
            ("general.architecture", "gemma3"),
            ("gemma3.embedding_length", "640"),
            ("gemma3.block_count", "12"),
            ("gemma3.attention.head_count", "4"),
            ("gemma3.attention.head_count_kv", "1"),
            ("gemma3.attention.key_length", "256"),
            ("gemma3.feed_forward_length", "2048"),
            ("gemma3.attention.layer_norm_rms_epsilon", "1e-6"),
            ("gemma3.rope.freq_base", "1000000"),
            ("gemma3.attention.sliding_window", "512"),
        ]
        .into_iter()
        .collect();
        m.extend(extra.iter().copied());
        Meta(m)
    }

    #[test]
    fn gemma3_hparams_follow_llama_cpp() {
        let c = Config::from_metadata(&gemma(&[]), 1000).unwrap();
        assert_eq!((c.head_dim, c.q_dim(), c.k_dim()), (256, 1024, 256));
        assert_eq!(c.rope_style, RopeStyle::Neox);
        assert_eq!(c.rope_base_swa, 10000.0);
        assert_eq!(c.sliding_window, Some(512));
        let swa: Vec<usize> = (0..12).filter(|&i| !c.swa_layers[i]).collect();
        assert_eq!(swa, vec![5, 11], "every 6th layer is global");
        assert_eq!(c.embed_scale, Some(640f32.sqrt()));
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(c.final_softcap, None);
        let c = Config::from_metadata(
            &gemma(&[
                ("gemma3.final_logit_softcapping", "30.0"),
                ("gemma3.rope.scaling.type", "linear"),
                ("gemma3.rope.scaling.factor", "8.0"),
            ]),
            1000,
        )
        .unwrap();
        assert_eq!(c.final_softcap, Some(30.0));
        assert_eq!(c.rope_freq_scale, 0.125);
    }

    /// DeepSeek-V2: MLA sizes as the converter writes them (one KV head of
    /// latent + rope), YaRN's mscale in the softmax scale and not in cos/sin,
    /// the routing keys; inconsistent sizes and unknown gating are errors.
    #[test]
    fn deepseek2_reads_mla_and_routing() {
        let keys = [
            ("deepseek2.attention.head_count_kv", "1"),
            ("deepseek2.attention.key_length", "40"),
            ("deepseek2.attention.value_length", "32"),
            ("deepseek2.attention.kv_lora_rank", "32"),
            ("deepseek2.attention.key_length_mla", "24"),
            ("deepseek2.attention.value_length_mla", "16"),
            ("deepseek2.rope.dimension_count", "8"),
            ("deepseek2.expert_count", "8"),
            ("deepseek2.expert_used_count", "2"),
            ("deepseek2.expert_group_count", "2"),
            ("deepseek2.expert_group_used_count", "1"),
            ("deepseek2.expert_weights_scale", "1.5"),
            ("deepseek2.expert_shared_count", "1"),
            ("deepseek2.leading_dense_block_count", "1"),
            ("deepseek2.rope.scaling.type", "yarn"),
            ("deepseek2.rope.scaling.factor", "40"),
            ("deepseek2.rope.scaling.original_context_length", "4096"),
            ("deepseek2.rope.scaling.yarn_log_multiplier", "0.0707"),
        ];
        let c = Config::from_metadata(&llama_like("deepseek2", &keys), 100).unwrap();
        let mla = c.mla.unwrap();
        assert_eq!((mla.q_lora_rank, mla.kv_lora_rank), (0, 32));
        assert_eq!(
            (mla.head_dim_k, mla.head_dim_v, mla.nope(c.n_rot)),
            (24, 16, 16)
        );
        let mscale = 1.0 + 0.0707f32 * 40f32.ln();
        assert_eq!(c.attn_scale, mscale * mscale / 24f32.sqrt());
        assert_eq!(c.yarn.unwrap().attn_factor, 1.0);
        assert_eq!(c.rope_style, RopeStyle::Normal);
        let r = c.routing;
        assert_eq!(
            (r.gating, r.norm, r.scale, r.groups),
            (Gating::SoftmaxTopK, false, 1.5, Some((2, 1)))
        );
        assert_eq!((c.n_expert_shared, c.n_dense_lead), (1, 1));
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut k: Vec<_> = keys.to_vec();
            k.extend_from_slice(extra);
            Config::from_metadata(&llama_like("deepseek2", &k), 100)
        };
        let c = with(&[
            ("deepseek2.expert_gating_func", "2"),
            ("deepseek2.expert_weights_norm", "true"),
            ("deepseek2.attention.q_lora_rank", "24"),
        ])
        .unwrap();
        assert_eq!((c.routing.gating, c.routing.norm), (Gating::Sigmoid, true));
        assert_eq!(c.mla.unwrap().q_lora_rank, 24);
        for (bad, what) in [
            (
                ("deepseek2.attention.key_length", "41"),
                "attention.key_length",
            ),
            (
                ("deepseek2.attention.head_count_kv", "2"),
                "attention.key_length",
            ),
            (("deepseek2.expert_gating_func", "7"), "expert_gating_func"),
            // No group kept: no expert is eligible.
            (
                ("deepseek2.expert_group_used_count", "0"),
                "expert_group_count",
            ),
            (
                ("deepseek2.leading_dense_block_count", "9"),
                "leading_dense_block_count",
            ),
        ] {
            match with(&[bad]) {
                Err(Error::Hparam { what: w, .. }) => assert!(w.starts_with(what), "{bad:?}: {w}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // Files from before llama.cpp split attn_kv_b have no MLA lengths.
        let old: Vec<_> = keys
            .iter()
            .copied()
            .filter(|(k, _)| !k.ends_with("_mla"))
            .collect();
        assert!(matches!(
            Config::from_metadata(&llama_like("deepseek2", &old), 100),
            Err(Error::Metadata { .. })
        ));
        assert!(c
            .features()
            .iter()
            .any(|f| f.starts_with("multi-head latent attention: 4 heads of 24 (q·k) / 16 (v)")));
    }

    /// A llama body under another family's name and keys.
    fn llama_like(arch: &'static str, extra: &[(&'static str, &'static str)]) -> Meta {
        let keys: [(&str, &str); 7] = [
            ("embedding_length", "64"),
            ("block_count", "8"),
            ("attention.head_count", "4"),
            ("attention.head_count_kv", "2"),
            ("feed_forward_length", "128"),
            ("attention.layer_norm_rms_epsilon", "1e-6"),
            ("rope.freq_base", "10000"),
        ];
        let mut m: HashMap<&'static str, &'static str> = keys
            .iter()
            .map(|(k, v)| (&*format!("{arch}.{k}").leak(), *v))
            .collect();
        m.insert("general.architecture", arch);
        m.extend(extra.iter().copied());
        Meta(m)
    }

    #[test]
    fn every_arch_has_one_family_row() {
        for f in FAMILIES {
            assert_eq!(Arch::from_name(f.name), Some(f.arch));
            assert_eq!(f.arch.family().name, f.name);
            assert_eq!(FAMILIES.iter().filter(|g| g.arch == f.arch).count(), 1);
        }
        assert_eq!(FAMILIES.len(), 13, "a new Arch variant needs its row");
    }

    /// SmolLM3 skips RoPE on layers 4, 8, … (llama.cpp
    /// `n_no_rope_layer_step = 4`, transformers `no_rope_layer_interval`);
    /// Granite reads its four multipliers (llama.cpp `llm_build_granite`).
    #[test]
    fn smollm3_and_granite_rows_set_their_features() {
        let c = Config::from_metadata(&llama_like("smollm3", &[]), 100).unwrap();
        let nope: Vec<usize> = (0..8).filter(|&l| !c.rope_layers[l]).collect();
        assert_eq!(nope, vec![3, 7]);
        assert_eq!(c.rope_style, RopeStyle::Normal);
        assert_eq!(
            (c.residual_scale, c.logit_scale, c.embed_scale),
            (None, None, None)
        );
        let c = Config::from_metadata(&llama_like("llama", &[]), 100).unwrap();
        assert!(c.rope_layers.iter().all(|&r| r));
        let g = [
            ("granite.embedding_scale", "12.0"),
            ("granite.attention.scale", "0.015625"),
            ("granite.residual_scale", "0.22"),
            ("granite.logit_scale", "8.0"),
        ];
        let c = Config::from_metadata(&llama_like("granite", &g), 100).unwrap();
        assert_eq!(c.embed_scale, Some(12.0));
        assert_eq!(c.attn_scale, 0.015625);
        assert_eq!((c.residual_scale, c.logit_scale), (Some(0.22), Some(8.0)));
        assert!(c.features().iter().any(|f| f == "logits divided by 8"));
        // Absent multipliers are none; the same keys on llama are ignored.
        let c = Config::from_metadata(&llama_like("granite", &[]), 100).unwrap();
        assert_eq!(c.attn_scale, 0.25);
        assert_eq!(c.residual_scale, None);
        let c = Config::from_metadata(&llama_like("llama", &[("llama.logit_scale", "8.0")]), 100)
            .unwrap();
        assert_eq!(c.logit_scale, None);
        let bad = llama_like("granite", &[("granite.residual_scale", "NaN")]);
        assert!(matches!(
            Config::from_metadata(&bad, 100),
            Err(Error::Hparam {
                what: "residual_scale",
                ..
            })
        ));
    }

    /// Gemma 2: even layers slide (llama.cpp `load_swa_pattern(ml, 2)`,
    /// transformers `layer_types`), one RoPE base for both kinds, both
    /// soft-caps.
    #[test]
    fn gemma2_row_sets_its_features() {
        let g = [
            ("gemma2.attention.sliding_window", "4096"),
            ("gemma2.attn_logit_softcapping", "50.0"),
            ("gemma2.final_logit_softcapping", "30.0"),
        ];
        let c = Config::from_metadata(&llama_like("gemma2", &g), 100).unwrap();
        let swa: Vec<usize> = (0..8).filter(|&l| c.swa_layers[l]).collect();
        assert_eq!(swa, vec![0, 2, 4, 6]);
        assert_eq!((c.rope_base, c.rope_base_swa), (10000.0, 10000.0));
        assert_eq!((c.attn_softcap, c.final_softcap), (Some(50.0), Some(30.0)));
        assert_eq!(c.embed_scale, Some(8.0));
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(c.rope_style, RopeStyle::Neox);
        assert_eq!(c.attn_scale, 0.25);
    }

    #[test]
    fn missing_keys_and_unknown_arch_are_errors() {
        let mut m = gemma(&[]);
        m.0.remove("gemma3.block_count");
        assert!(matches!(
            Config::from_metadata(&m, 10),
            Err(Error::Metadata { .. })
        ));
        let m = Meta([("general.architecture", "mamba")].into_iter().collect());
        assert!(matches!(
            Config::from_metadata(&m, 10),
            Err(Error::Architecture { .. })
        ));
        let m = gemma(&[("gemma3.attention.head_count_kv", "3")]);
        assert!(matches!(
            Config::from_metadata(&m, 10),
            Err(Error::Hparam { .. })
        ));
    }

    /// Sizes from the file are bounded before anything is allocated from
    /// them or multiplied: a crafted block_count of 2^64-1 (which sized
    /// per-layer vectors) or zero widths are named errors.
    #[test]
    fn absurd_sizes_are_refused_by_name() {
        for (key, v, what) in [
            ("gemma3.block_count", "18446744073709551615", "block_count"),
            ("gemma3.block_count", "0", "block_count"),
            (
                "gemma3.embedding_length",
                "1099511627776",
                "embedding_length",
            ),
            ("gemma3.attention.head_count", "0", "attention.head_count"),
            (
                "gemma3.attention.head_count_kv",
                "0",
                "attention.head_count_kv",
            ),
            (
                "gemma3.attention.key_length",
                "4294967296",
                "attention.key_length",
            ),
            ("gemma3.feed_forward_length", "0", "feed_forward_length"),
            (
                "gemma3.context_length",
                "18446744073709551615",
                "context_length",
            ),
        ] {
            match Config::from_metadata(&gemma(&[(key, v)]), 1000) {
                Err(Error::Hparam { what: w, .. }) => assert!(w.starts_with(what), "{key}: {w}"),
                other => panic!("{key}={v}: {other:?}"),
            }
        }
    }
}
