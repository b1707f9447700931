//! Binding a [`Model`] to a [`WeightSource`]: every tensor found by its GGUF
//! name, shape-checked, the matrices in native layouts, the small vectors
//! converted to f32.

use super::mla::MlaLayer;
use super::{gemma3n, Ffn, Graph, Layer, LoadOptions, Model, MoeFfn};
use crate::config::Config;
use crate::error::{Error, ExpertSliceProblem, Result};
use crate::experts::{ExpertSlice, ExpertStore, SliceData};
use crate::matrix::{Matrix, Proj};
use crate::ops::Rope;
use crate::weights::{to_f32_vec, TensorRef, WeightSource};

pub(super) fn dense_vec(
    w: &dyn WeightSource,
    name: &str,
    len: usize,
    what: &'static str,
) -> Result<Option<Vec<f32>>> {
    let Some(t) = w.tensor(name) else {
        return Ok(None);
    };
    let v = to_f32_vec(name, &t, what)?;
    if v.len() != len {
        return Err(Error::Shape {
            name: name.into(),
            expected: vec![len as u64],
            found: t.dims(),
        });
    }
    Ok(Some(v))
}

pub(super) fn need<T>(v: Option<T>, name: &str) -> Result<T> {
    v.ok_or_else(|| Error::MissingTensor { name: name.into() })
}

pub(super) fn tensor<'a>(w: &'a dyn WeightSource, name: &str) -> Result<TensorRef<'a>> {
    need(w.tensor(name), name)
}

/// The required `rows × cols` matrix `name`, in a native layout.
pub(super) fn matrix<'a>(
    w: &'a dyn WeightSource,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Matrix<'a>> {
    Matrix::bind(name, tensor(w, name)?, cols, Some(rows))?.into_native(name)
}

/// The required vector `name` of `len` values (as [`dense_vec`]).
pub(super) fn required_vec(
    w: &dyn WeightSource,
    name: &str,
    len: usize,
    what: &'static str,
) -> Result<Vec<f32>> {
    need(dense_vec(w, name, len, what)?, name)
}

/// Every expert slice of the model, shape-checked, in ExpertLayout order.
pub(super) fn expert_slices<'a>(
    w: &'a dyn WeightSource,
    c: &Config,
) -> Result<Vec<ExpertSlice<'a>>> {
    // No capacity from the metadata: a bogus expert count fails at the first
    // slice that does not exist, before any large allocation.
    let mut out = Vec::new();
    for l in c.n_dense_lead..c.n_layer {
        for e in 0..c.n_expert {
            for part in 0..3 {
                let s = w.expert_slice(l, e, part, c.n_expert).ok_or_else(|| {
                    Error::MissingTensor {
                        name: crate::experts::stacked_name(l, part),
                    }
                })??;
                let want = if part == 2 {
                    (c.n_embd, c.n_ff_exp)
                } else {
                    (c.n_ff_exp, c.n_embd)
                };
                let bad = |problem: ExpertSliceProblem| Error::ExpertSlice {
                    layer: l,
                    expert: e,
                    part: crate::experts::PARTS[part],
                    origin: s.origin.clone(),
                    problem,
                };
                if s.data.shape() != want {
                    return Err(bad(ExpertSliceProblem::Shape {
                        found: s.data.shape(),
                        expected: want,
                    }));
                }
                if let SliceData::Raw {
                    ty, rows, bytes, ..
                } = s.data
                {
                    let row = ty.bytes_for(want.1 as u64).map(|b| b as usize);
                    if row.and_then(|r| r.checked_mul(rows)) != Some(bytes.len()) {
                        return Err(bad(ExpertSliceProblem::Size {
                            bytes: bytes.len() as u64,
                            rows: rows as u64,
                            cols: want.1 as u64,
                            ty,
                        }));
                    }
                }
                out.push(s);
            }
        }
    }
    Ok(out)
}

impl<'a> Model<'a> {
    /// Binds every tensor of `w` with [`LoadOptions::default`].
    pub fn load(w: &'a dyn WeightSource) -> Result<Model<'a>> {
        Self::load_with(w, &LoadOptions::default())
    }

    /// Binds every tensor of `w` (no weight is copied, except the small
    /// norm/bias/router vectors, which are converted to f32; experts are
    /// read as `opts.experts` says).
    pub fn load_with(w: &'a dyn WeightSource, opts: &LoadOptions) -> Result<Model<'a>> {
        let embd_t = tensor(w, "token_embd.weight")?;
        let dims = embd_t.dims();
        let n_vocab = dims.get(1).copied().unwrap_or(0) as usize;
        let config = Config::from_metadata(w as &dyn crate::weights::MetadataSource, n_vocab)?;
        let c = &config;
        let d = c.n_embd;
        let embd = Matrix::bind("token_embd.weight", embd_t, d, None)?;
        let output = match w.tensor("output.weight") {
            Some(t) => Matrix::bind("output.weight", t, d, Some(n_vocab))?,
            None => embd.clone(),
        }
        .into_native("output.weight")?;
        let output_norm = required_vec(w, "output_norm.weight", d, "norm")?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for l in 0..c.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}");
            let mat = |s: &str, cols: usize, rows: usize| matrix(w, &n(s), cols, rows);
            // Gemma 3n's KV-sharing layers have queries only.
            let kv_shared = c.gemma3n.as_ref().is_some_and(|g| g.kv_source[l] != l);
            let mut mla = None;
            let qkv = if let Some(m) = &c.mla {
                let (first, rest) = MlaLayer::load(w, c, m, l)?;
                mla = Some(Box::new(rest));
                first
            } else if kv_shared {
                Proj::new(vec![mat("attn_q.weight", d, c.q_dim())?])
            } else if w.tensor(&n("attn_qkv.weight")).is_some() {
                // Stored fused (Phi-3): q‖k‖v rows, our layout already.
                Proj::new(vec![mat(
                    "attn_qkv.weight",
                    d,
                    c.q_dim() + c.k_dim() + c.v_dim(),
                )?])
            } else {
                Proj::new(vec![
                    mat("attn_q.weight", d, c.q_dim())?,
                    mat("attn_k.weight", d, c.k_dim())?,
                    mat("attn_v.weight", d, c.v_dim())?,
                ])
            };
            let biases = [
                dense_vec(w, &n("attn_q.bias"), c.q_dim(), "bias")?,
                dense_vec(w, &n("attn_k.bias"), c.k_dim(), "bias")?,
                dense_vec(w, &n("attn_v.bias"), c.v_dim(), "bias")?,
            ];
            let qkv_bias = if biases.iter().any(Option::is_some) {
                let dims = [c.q_dim(), c.k_dim(), c.v_dim()];
                Some(
                    biases
                        .into_iter()
                        .zip(dims)
                        .flat_map(|(b, len)| b.unwrap_or_else(|| vec![0.0; len]))
                        .collect(),
                )
            } else {
                None
            };
            let mut inputs = crate::observe::BlockInputs::default();
            let bound = |names: &[&str]| -> Vec<String> {
                names
                    .iter()
                    .map(|s| n(s))
                    .filter(|name| w.tensor(name).is_some())
                    .collect()
            };
            if c.mla.is_none() {
                inputs.attn = bound(&[
                    "attn_q.weight",
                    "attn_k.weight",
                    "attn_v.weight",
                    "attn_qkv.weight",
                ]);
                if kv_shared {
                    inputs.attn = bound(&["attn_q.weight"]);
                }
            }
            inputs.attn_out = bound(&["attn_output.weight"]);
            let ffn = if c.n_expert > 0 && l >= c.n_dense_lead {
                inputs.ffn = bound(&[
                    "ffn_gate_inp.weight",
                    "ffn_gate_shexp.weight",
                    "ffn_up_shexp.weight",
                ]);
                inputs.ffn_down = bound(&["ffn_down_shexp.weight"]);
                inputs.experts = bound(&["ffn_gate_exps.weight", "ffn_up_exps.weight"]);
                inputs.experts_down = bound(&["ffn_down_exps.weight"]);
                let name = n("ffn_gate_inp.weight");
                let (ne, ff) = (c.n_expert, c.n_ff_exp);
                let bias = |s: &str, len: usize| dense_vec(w, &n(s), ne * len, "bias");
                let shared = match c.n_expert_shared {
                    0 => None,
                    k => {
                        let sff = ff * k;
                        let gate_up = vec![
                            mat("ffn_gate_shexp.weight", d, sff)?,
                            mat("ffn_up_shexp.weight", d, sff)?,
                        ];
                        Some((Proj::new(gate_up), mat("ffn_down_shexp.weight", sff, d)?))
                    }
                };
                Ffn::Moe(Box::new(MoeFfn {
                    router: required_vec(w, &name, ne * d, "router")?,
                    router_bias: dense_vec(w, &n("ffn_gate_inp.bias"), ne, "bias")?,
                    bias: [
                        bias("ffn_gate_exps.bias", ff)?,
                        bias("ffn_up_exps.bias", ff)?,
                        bias("ffn_down_exps.bias", d)?,
                    ],
                    select_bias: dense_vec(w, &n("exp_probs_b.bias"), ne, "bias")?,
                    shared,
                }))
            } else {
                // Phi-3 stores gate‖up as one `ffn_up` of 2·n_ff rows (gate
                // first: llama.cpp's LLM_FFN_SWIGLU split), our layout.
                inputs.ffn = bound(&["ffn_gate.weight", "ffn_up.weight"]);
                inputs.ffn_down = bound(&["ffn_down.weight"]);
                let gate_up = match w.tensor(&n("ffn_gate.weight")) {
                    Some(_) => vec![
                        mat("ffn_gate.weight", d, c.n_ff)?,
                        mat("ffn_up.weight", d, c.n_ff)?,
                    ],
                    None => vec![mat("ffn_up.weight", d, 2 * c.n_ff)?],
                };
                Ffn::Dense {
                    gate_up: Box::new(Proj::new(gate_up)),
                    down: Box::new(mat("ffn_down.weight", c.n_ff, d)?),
                }
            };
            let fam = c.arch.family();
            // Pre-norm blocks have both input norms; post-norm blocks
            // (OLMo 2) neither, and their post norms instead.
            let pre_norm = |name: &str| -> Result<Option<Vec<f32>>> {
                match fam.post_norm {
                    false => required_vec(w, &n(name), d, "norm").map(Some),
                    true => Ok(None),
                }
            };
            let post_norm = |name: &str| -> Result<Option<Vec<f32>>> {
                match fam.post_norm {
                    false => dense_vec(w, &n(name), d, "norm"),
                    true => required_vec(w, &n(name), d, "norm").map(Some),
                }
            };
            // q/k norms per head, or over all heads together (OLMo 2).
            let (q_norm_len, k_norm_len) = match fam.qk_norm_all_heads {
                false => (c.head_dim, c.head_dim),
                true => (c.q_dim(), c.k_dim()),
            };
            layers.push(Layer {
                attn_norm: pre_norm("attn_norm.weight")?,
                qkv,
                qkv_bias,
                q_norm: dense_vec(w, &n("attn_q_norm.weight"), q_norm_len, "norm")?,
                k_norm: dense_vec(w, &n("attn_k_norm.weight"), k_norm_len, "norm")?,
                wo: mat(
                    "attn_output.weight",
                    c.n_head * c.mla.map_or(c.head_dim_v, |m| m.head_dim_v),
                    d,
                )?,
                wo_bias: dense_vec(w, &n("attn_output.bias"), d, "bias")?,
                sinks: dense_vec(w, &n("attn_sinks.weight"), c.n_head, "sinks")?,
                // gpt-oss's pre-FFN norm has this name (then there is no
                // post-attention norm).
                post_attn_norm: match fam.ffn_norm {
                    "post_attention_norm.weight" => None,
                    _ => post_norm("post_attention_norm.weight")?,
                },
                ffn_norm: pre_norm(fam.ffn_norm)?,
                ffn,
                post_ffn_norm: post_norm("post_ffw_norm.weight")?,
                swa: c.swa_layers[l],
                mla,
                inputs: Box::new(inputs),
            });
        }
        let experts = if c.n_expert > 0 {
            Some(ExpertStore::new(
                w,
                c.n_expert,
                c.n_dense_lead,
                expert_slices(w, c)?,
                opts.experts,
            )?)
        } else {
            None
        };
        let graph = match &c.gemma3n {
            Some(g) => Graph::Gemma3n(Box::new(gemma3n::Gemma3n::load(
                w, g, d, c.n_layer, opts.ple,
            )?)),
            None => Graph::Shared,
        };
        // Llama 3.1-style frequency factors (llama.cpp `rope_freqs.weight`,
        // divided into the frequencies by `ggml_rope_ext`).
        // LongRoPE (Phi-3): the long factors for a context beyond the
        // original one, else the short (llama.cpp `get_rope_factors`).
        let freq_factors = match dense_vec(w, "rope_freqs.weight", c.n_rot / 2, "rope factors")? {
            Some(f) => Some(f),
            None if c.arch.family().longrope => {
                let name = match opts.context > c.n_ctx_orig {
                    true => "rope_factors_long.weight",
                    false => "rope_factors_short.weight",
                };
                dense_vec(w, name, c.n_rot / 2, "rope factors")?
            }
            None => None,
        };
        // YaRN scales every layer's rotation (llama.cpp's
        // `rope_freq_scale_train_swa` = `rope_freq_scale_train`).
        let (rope_global, rope_swa) = match &c.yarn {
            Some(y) => (
                Rope::yarn(c.n_rot, c.rope_base, c.rope_style, y),
                Rope::yarn(c.n_rot, c.rope_base_swa, c.rope_style, y),
            ),
            None => (
                Rope::new(
                    c.n_rot,
                    c.rope_base,
                    c.rope_freq_scale,
                    c.rope_style,
                    freq_factors.as_deref(),
                )
                .with_mscale(c.rope_attn_factor),
                Rope::new(
                    c.n_rot,
                    c.rope_base_swa,
                    1.0,
                    c.rope_style,
                    freq_factors.as_deref(),
                )
                .with_mscale(c.rope_attn_factor),
            ),
        };
        let mut model = Model {
            config,
            embd,
            layers,
            output_norm,
            output,
            rope_global,
            rope_swa,
            experts,
            graph,
            kv: opts.kv,
            kv_dequantized: opts.kv_dequantized,
            pool: opts.threads.pool(),
            gpu: None,
        };
        super::kv::check_types(&model.config, opts.kv)?;
        model.gpu = super::gpu::GpuModel::attach(&model, w, opts)?.map(Box::new);
        Ok(model)
    }
}
