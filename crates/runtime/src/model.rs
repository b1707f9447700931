//! The transformer graph shared by llama, qwen2, qwen3, gemma3 and the
//! mixture-of-experts models qwen3moe and mixtral.
//!
//! One graph with optional pieces, switched on by which tensors exist
//! (q/k/v biases: qwen2; per-head q/k norms: qwen3, gemma3; post-attention
//! and post-FFN norms: gemma3; a router and routed experts instead of the
//! FFN: qwen3moe, mixtral) and by [`Config`] (rope style, embedding scale,
//! activation, sliding-window layers, soft-capping).
//!
//! One step runs a batch of rows through every weight once: the rows are the
//! next tokens of one or more sequences ([`Sequence`], each its own KV
//! cache). [`Model::forward`] is one sequence (a prompt goes through as one
//! matrix, decoding is the same code with one row); [`Model::forward_batch`]
//! is several at once (a server's continuous batching: decoding 8 streams
//! costs about one pass over the weights, not 8). Each row's arithmetic is
//! the same whichever batch it is in, because the quant kernels give every
//! row the same bits for one vector or many.
//!
//! Tensor names are GGUF's (`llama.cpp/src/llama-arch.cpp`, LLM_TENSOR_NAMES).

use crate::config::{Activation, Config};
use crate::error::{Error, Result};
use crate::experts::{ExpertMode, ExpertSlice, ExpertStats, ExpertStore, SliceData};
use crate::matrix::{Matrix, Proj};
use crate::ops::{self, Rope};
use crate::ple::PleIo;
use crate::weights::{to_f32_vec, TensorRef, WeightSource};
use gpack_quant::Pool;
use std::sync::Mutex;

mod gemma3n;
pub use gemma3n::{PleMode, PleStats};

/// The feed-forward part of a block.
#[derive(Debug)]
enum Ffn<'a> {
    /// gate‖up `[2 · n_ff] × n_embd` and down `n_embd × n_ff`.
    Dense {
        gate_up: Box<Proj<'a>>,
        down: Box<Matrix<'a>>,
    },
    /// Routed experts (in the model's [`ExpertStore`]); the router is
    /// `[n_expert][n_embd]` f32.
    Moe { router: Vec<f32> },
}

/// One transformer block's weights.
#[derive(Debug)]
struct Layer<'a> {
    /// `[n_embd]` pre-attention RMS norm.
    attn_norm: Vec<f32>,
    /// q‖k‖v: `[q_dim + k_dim + v_dim] × n_embd`.
    qkv: Proj<'a>,
    /// `[q_dim + k_dim + v_dim]` biases (zeros where absent), if any bias exists.
    qkv_bias: Option<Vec<f32>>,
    /// `[head_dim]` per-head q RMS norm.
    q_norm: Option<Vec<f32>>,
    /// `[head_dim]` per-head k RMS norm.
    k_norm: Option<Vec<f32>>,
    /// `n_embd × (n_head · head_dim_v)` output projection.
    wo: Matrix<'a>,
    /// `[n_embd]` norm of the attention output (gemma3).
    post_attn_norm: Option<Vec<f32>>,
    /// `[n_embd]` pre-FFN RMS norm.
    ffn_norm: Vec<f32>,
    ffn: Ffn<'a>,
    /// `[n_embd]` norm of the FFN output (gemma3).
    post_ffn_norm: Option<Vec<f32>>,
    /// Sliding-window layer.
    swa: bool,
}

/// How [`Model::load_with`] binds a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// How routed experts are read (ignored by dense models).
    pub experts: ExpertMode,
    /// How a `.gpack`'s per-layer embedding table is read (models with one:
    /// Gemma 3n).
    pub ple: PleIo,
    /// Keep sequences' keys and values as IEEE half floats (as llama.cpp
    /// does by default) instead of f32: half the KV memory and half the bytes
    /// attention streams per step (with several long sequences in a step,
    /// attention is memory-bound). K/V are rounded to f16 once when written.
    pub kv_f16: bool,
}

/// The default PLE row cache: 1024 sets × 4 ways.
pub const DEFAULT_PLE_CACHE: PleIo = PleIo::Direct {
    sets: 1024,
    ways: 4,
};

impl Default for LoadOptions {
    /// Experts as the environment says ([`ExpertMode::from_env`]); PLE rows
    /// by direct I/O with [`DEFAULT_PLE_CACHE`], or mmap when
    /// `GPACK_PLE_MMAP=1`.
    fn default() -> Self {
        LoadOptions {
            experts: ExpertMode::from_env(),
            ple: if std::env::var("GPACK_PLE_MMAP").is_ok_and(|v| v == "1") {
                PleIo::Mmap
            } else {
                DEFAULT_PLE_CACHE
            },
            kv_f16: false,
        }
    }
}

/// A loaded model: weights bound (borrowed) from a [`WeightSource`].
#[derive(Debug)]
pub struct Model<'a> {
    /// Hyperparameters.
    pub config: Config,
    /// `n_vocab × n_embd` token embedding.
    embd: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    /// `[n_embd]` final norm.
    output_norm: Vec<f32>,
    /// `n_vocab × n_embd` head (the embedding when tied).
    output: Matrix<'a>,
    rope_global: Rope,
    rope_swa: Rope,
    /// Routed experts of MoE models.
    experts: Option<ExpertStore<'a>>,
    /// Gemma 3n's own weights and PLE table.
    g3n: Option<Box<gemma3n::Gemma3n<'a>>>,
    /// Sequences keep K/V as f16 ([`LoadOptions::kv_f16`]).
    kv_f16: bool,
}

/// Which logits [`Model::forward`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (prefill of a prefix whose predictions are not needed).
    None,
    /// The last position's only (`[n_vocab]`).
    Last,
    /// Every position's (`[n][n_vocab]`).
    All,
}

/// Key or value storage of a sequence: f32, or IEEE half floats (as
/// llama.cpp keeps its cache; half the bytes for attention to stream).
#[derive(Debug)]
enum Kv {
    F32(Vec<f32>),
    F16(Vec<u16>),
}

impl Kv {
    fn new(len: usize, f16: bool) -> Kv {
        if f16 {
            Kv::F16(vec![0; len])
        } else {
            Kv::F32(vec![0.0; len])
        }
    }
    fn bytes(&self) -> usize {
        match self {
            Kv::F32(v) => v.len() * 4,
            Kv::F16(v) => v.len() * 2,
        }
    }
    #[inline]
    fn set(&mut self, i: usize, x: f32) {
        match self {
            Kv::F32(v) => v[i] = x,
            Kv::F16(v) => v[i] = half::f16::from_f32(x).to_bits(),
        }
    }
    /// [`ops::scores_transposed`] over one block of keys `kt` (a range of
    /// this cache: `[head_dim][KB]`), positions from `start` in the block.
    fn scores(
        &self,
        q: &[f32],
        scale: f32,
        kt: std::ops::Range<usize>,
        start: usize,
        sc: &mut [f32],
    ) {
        match self {
            Kv::F32(k) => ops::scores_transposed(q, scale, &k[kt], KB, start, sc),
            Kv::F16(k) => ops::scores_transposed(q, scale, &k[kt], KB, start, sc),
        }
    }
    /// [`ops::weighted_rows`] over the value rows in `v` (a range of this
    /// cache, rows `stride` apart).
    fn weighted_rows(&self, a: &[f32], v: std::ops::Range<usize>, stride: usize, out: &mut [f32]) {
        match self {
            Kv::F32(x) => ops::weighted_rows(a, &x[v], stride, out),
            Kv::F16(x) => ops::weighted_rows(a, &x[v], stride, out),
        }
    }
    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Kv::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Kv::F16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = half::f16::from_f32(x).to_bits()),
        }
    }
}

/// One sequence's KV cache.
#[derive(Debug)]
pub struct Sequence {
    /// Positions the cache holds.
    n_ctx: usize,
    /// Next position.
    pos: usize,
    /// `[n_layer][n_head_kv][n_ctx / KB][head_dim][KB]` keys (rotated),
    /// transposed within blocks of [`KB`] positions so that q·K over a block
    /// runs over contiguous positions (vectorizes without horizontal sums;
    /// see `ops::scores_transposed`), and blocked so that one position's
    /// write and a short context's read touch a few pages, not `head_dim`
    /// pages `n_ctx · 4` bytes apart (perf log in [`Sequence::k_at`]).
    k_cache: Kv,
    /// `[n_layer][n_ctx][v_dim]` values.
    v_cache: Kv,
}

/// Positions per block of the transposed key cache.
///
/// Perf log (SmolLM2-135M, `gpack serve --parallel 8 --ctx 1024`, 8 streams
/// of 128 tokens): with one `[head_dim][n_ctx]` plane per head, the 192
/// keys of a position were written 4 KiB apart and every (row, head) score
/// pass read 64 rows 4 KiB apart — the step's key writes and
/// `scores_transposed` took ~20 % of the server's profile.
pub const KB: usize = 64;

impl Sequence {
    /// Index of key dim `d` of kv head `kvh`, layer `l`, position `p`.
    #[inline]
    fn k_at(&self, c: &Config, l: usize, kvh: usize, d: usize, p: usize) -> usize {
        let nb = self.n_ctx.div_ceil(KB);
        ((l * c.n_head_kv + kvh) * nb + p / KB) * c.head_dim * KB + d * KB + p % KB
    }

    /// Writes the values `v` (`[v_dim]`) of position `p` in layer `l`.
    #[inline]
    fn put_values(&mut self, c: &Config, l: usize, p: usize, v: &[f32]) {
        let vd = c.v_dim();
        self.v_cache.write((l * self.n_ctx + p) * vd, v);
    }

    /// Writes the rotated keys `k` (`[n_head_kv][head_dim]`) of position `p`
    /// in layer `l`.
    #[inline]
    fn put_keys(&mut self, c: &Config, l: usize, p: usize, k: &[f32]) {
        for (kvh, kh) in k.chunks_exact(c.head_dim).enumerate() {
            let base = self.k_at(c, l, kvh, 0, p);
            for (d, &v) in kh.iter().enumerate() {
                self.k_cache.set(base + d * KB, v);
            }
        }
    }

    /// Tokens in the cache (= the next position).
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Forgets the cache after `pos` tokens (keeps the prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
    /// Empties the cache (the buffers are kept for the next sequence).
    pub fn reset(&mut self) {
        self.pos = 0;
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.k_cache.bytes() + self.v_cache.bytes()
    }
}

/// Scratch of a forward step, grown to the largest step seen. Everything a
/// decode step touches is allocated once.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Rows the buffers hold.
    cap: usize,
    /// `[rows][n_embd]` residual stream.
    x: Vec<f32>,
    /// `[rows][n_embd]` normed input of a projection.
    xb: Vec<f32>,
    /// `[rows][q_dim + k_dim + v_dim]` q‖k‖v.
    qkv: Vec<f32>,
    /// `[rows][n_head · head_dim_v]` attention output.
    att: Vec<f32>,
    /// `[rows][n_embd]` block output before the residual add.
    out: Vec<f32>,
    /// `[rows][2 · n_ff]` gate‖up.
    gu: Vec<f32>,
    /// `[rows][n_ff]` activated FFN hidden.
    hb: Vec<f32>,
    /// `[rows][n_rot]` cos/sin pairs of global layers.
    cs_global: Vec<f32>,
    /// `[rows][n_rot]` cos/sin pairs of sliding-window layers.
    cs_swa: Vec<f32>,
    /// `[rows]` the sequence of each row.
    row_seq: Vec<usize>,
    /// `[rows]` the position of each row in its sequence.
    row_pos: Vec<usize>,
    /// Rows whose logits the step computes.
    head_rows: Vec<usize>,
    /// Attention score buffers, one per concurrent task.
    score_slots: Vec<Mutex<Vec<f32>>>,
    /// MoE: `[n_expert]` (row, weight) lists of one layer.
    routes: Vec<Vec<(usize, f32)>>,
    /// MoE: `[n_expert]` router probabilities of one row.
    probs: Vec<f32>,
    /// MoE: the gathered rows of one expert and its intermediate results.
    moe_x: Vec<f32>,
    moe_g: Vec<f32>,
    moe_u: Vec<f32>,
    moe_y: Vec<f32>,
    /// Scratch of projections whose members are not one fused tensor.
    tmp: Vec<f32>,
    /// `[m][n_vocab]` logits of the last step.
    logits: Vec<f32>,
    /// Gemma 3n's buffers.
    g3n: gemma3n::G3nScratch,
}

impl Scratch {
    /// `[m][n_vocab]` logits of the last step.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }
}

/// One sequence and its scratch: what [`Model::forward`] runs on.
#[derive(Debug)]
pub struct State {
    seq: Sequence,
    scratch: Scratch,
}

impl State {
    /// Next position (= tokens in the cache).
    pub fn pos(&self) -> usize {
        self.seq.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.seq.n_ctx
    }
    /// Forgets the cache after `pos` tokens (keeps the prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.seq.truncate(pos);
    }
    /// Logits of the last forward.
    pub fn logits(&self) -> &[f32] {
        &self.scratch.logits
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.seq.kv_bytes()
    }
}

fn dense_vec(
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

fn need<T>(v: Option<T>, name: &str) -> Result<T> {
    v.ok_or_else(|| Error::MissingTensor { name: name.into() })
}

fn tensor<'a>(w: &'a dyn WeightSource, name: &str) -> Result<TensorRef<'a>> {
    need(w.tensor(name), name)
}

/// The required `rows × cols` matrix `name`, in a native layout.
fn matrix<'a>(w: &'a dyn WeightSource, name: &str, cols: usize, rows: usize) -> Result<Matrix<'a>> {
    Matrix::bind(name, tensor(w, name)?, cols, Some(rows))?.into_native(name)
}

/// The required vector `name` of `len` values (as [`dense_vec`]).
fn required_vec(
    w: &dyn WeightSource,
    name: &str,
    len: usize,
    what: &'static str,
) -> Result<Vec<f32>> {
    need(dense_vec(w, name, len, what)?, name)
}

/// Every expert slice of the model, shape-checked, in ExpertLayout order.
fn expert_slices<'a>(w: &'a dyn WeightSource, c: &Config) -> Result<Vec<ExpertSlice<'a>>> {
    // No capacity from the metadata: a bogus expert count fails at the first
    // slice that does not exist, before any large allocation.
    let mut out = Vec::new();
    for l in 0..c.n_layer {
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
                let bad = |problem: String| Error::ExpertSlice {
                    layer: l,
                    expert: e,
                    part: crate::experts::PARTS[part],
                    origin: s.origin.clone(),
                    problem,
                };
                if s.data.shape() != want {
                    return Err(bad(format!(
                        "shape {:?} (rows, cols), expected {want:?}",
                        s.data.shape()
                    )));
                }
                if let SliceData::Raw {
                    ty, rows, bytes, ..
                } = s.data
                {
                    let row = ty.bytes_for(want.1 as u64).map(|b| b as usize);
                    if row.and_then(|r| r.checked_mul(rows)) != Some(bytes.len()) {
                        return Err(bad(format!(
                            "{} bytes for {rows} rows of {ty}",
                            bytes.len()
                        )));
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
            let qkv = if kv_shared {
                Proj::new(vec![mat("attn_q.weight", d, c.q_dim())?])
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
            let ffn = if c.n_expert > 0 {
                let name = n("ffn_gate_inp.weight");
                Ffn::Moe {
                    router: required_vec(w, &name, c.n_expert * d, "router")?,
                }
            } else {
                Ffn::Dense {
                    gate_up: Box::new(Proj::new(vec![
                        mat("ffn_gate.weight", d, c.n_ff)?,
                        mat("ffn_up.weight", d, c.n_ff)?,
                    ])),
                    down: Box::new(mat("ffn_down.weight", c.n_ff, d)?),
                }
            };
            layers.push(Layer {
                attn_norm: required_vec(w, &n("attn_norm.weight"), d, "norm")?,
                qkv,
                qkv_bias,
                q_norm: dense_vec(w, &n("attn_q_norm.weight"), c.head_dim, "norm")?,
                k_norm: dense_vec(w, &n("attn_k_norm.weight"), c.head_dim, "norm")?,
                wo: mat("attn_output.weight", c.n_head * c.head_dim_v, d)?,
                post_attn_norm: dense_vec(w, &n("post_attention_norm.weight"), d, "norm")?,
                ffn_norm: required_vec(w, &n("ffn_norm.weight"), d, "norm")?,
                ffn,
                post_ffn_norm: dense_vec(w, &n("post_ffw_norm.weight"), d, "norm")?,
                swa: c.swa_layers[l],
            });
        }
        let experts = if c.n_expert > 0 {
            Some(ExpertStore::new(
                w,
                c.n_expert,
                expert_slices(w, c)?,
                opts.experts,
            )?)
        } else {
            None
        };
        let g3n = match &c.gemma3n {
            Some(g) => Some(Box::new(gemma3n::Gemma3n::load(
                w, g, d, c.n_layer, opts.ple,
            )?)),
            None => None,
        };
        // Llama 3.1-style frequency factors (llama.cpp `rope_freqs.weight`,
        // divided into the frequencies by `ggml_rope_ext`).
        let freq_factors = dense_vec(w, "rope_freqs.weight", c.n_rot / 2, "rope factors")?;
        let rope_global = Rope::new(
            c.n_rot,
            c.rope_base,
            c.rope_freq_scale,
            c.rope_style,
            freq_factors.as_deref(),
        );
        let rope_swa = Rope::new(
            c.n_rot,
            c.rope_base_swa,
            1.0,
            c.rope_style,
            freq_factors.as_deref(),
        );
        Ok(Model {
            config,
            embd,
            layers,
            output_norm,
            output,
            rope_global,
            rope_swa,
            experts,
            g3n,
            kv_f16: opts.kv_f16,
        })
    }

    /// The PLE table's counters (`None` for a model without one).
    pub fn ple_stats(&self) -> Option<PleStats> {
        self.g3n.as_ref().map(|g| g.stats())
    }

    /// Whether every layer's q‖k‖v and gate‖up run as single kernel calls.
    pub fn is_fused(&self) -> bool {
        self.layers.iter().all(|l| {
            l.qkv.is_fused()
                && match &l.ffn {
                    Ffn::Dense { gate_up, .. } => gate_up.is_fused(),
                    Ffn::Moe { .. } => true,
                }
        })
    }

    /// The expert store's counters (`None` for a dense model).
    pub fn expert_stats(&self) -> Option<ExpertStats> {
        self.experts.as_ref().map(ExpertStore::stats)
    }

    /// How experts are read (`None` for a dense model).
    pub fn expert_mode(&self) -> Option<ExpertMode> {
        self.experts.as_ref().map(ExpertStore::mode)
    }

    /// Bytes of all routed experts (0 for a dense model).
    pub fn expert_bytes(&self) -> u64 {
        self.experts.as_ref().map_or(0, ExpertStore::total_bytes)
    }

    /// An empty sequence with a KV cache of `n_ctx` positions.
    pub fn new_sequence(&self, n_ctx: usize) -> Sequence {
        let c = &self.config;
        Sequence {
            n_ctx,
            pos: 0,
            k_cache: Kv::new(c.n_layer * n_ctx.div_ceil(KB) * KB * c.k_dim(), self.kv_f16),
            v_cache: Kv::new(c.n_layer * n_ctx * c.v_dim(), self.kv_f16),
        }
    }

    /// A fresh state with a KV cache of `n_ctx` positions.
    pub fn new_state(&self, n_ctx: usize) -> State {
        State {
            seq: self.new_sequence(n_ctx),
            scratch: Scratch::default(),
        }
    }

    fn reserve(&self, s: &mut Scratch, n: usize, max_ctx: usize) {
        let c = &self.config;
        if s.cap < n {
            s.x.resize(n * c.n_embd, 0.0);
            s.xb.resize(n * c.n_embd, 0.0);
            s.qkv.resize(n * (c.q_dim() + c.k_dim() + c.v_dim()), 0.0);
            s.att.resize(n * c.n_head * c.head_dim_v, 0.0);
            s.out.resize(n * c.n_embd, 0.0);
            s.gu.resize(n * 2 * c.n_ff, 0.0);
            s.hb.resize(n * c.n_ff, 0.0);
            s.cs_global.resize(n * c.n_rot, 0.0);
            s.cs_swa.resize(n * c.n_rot, 0.0);
            s.cap = n;
        }
        let slots = Pool::global().threads() + 1;
        if s.score_slots.len() < slots {
            s.score_slots.resize_with(slots, || Mutex::new(Vec::new()));
        }
        for m in &mut s.score_slots {
            let v = m.get_mut().unwrap_or_else(|e| e.into_inner());
            if v.len() < max_ctx {
                v.resize(max_ctx, 0.0);
            }
        }
    }

    /// Runs `tokens` at positions `state.pos() ..`, appends them to the KV
    /// cache and returns the requested logits (`[n_vocab]` for
    /// [`Logits::Last`], `[n][n_vocab]` for [`Logits::All`]).
    ///
    /// On an error the cache position is unchanged (what was written past it
    /// is overwritten by the next call).
    pub fn forward<'s>(&self, s: &'s mut State, tokens: &[u32], want: Logits) -> Result<&'s [f32]> {
        let n = tokens.len();
        let State { seq, scratch } = s;
        scratch.head_rows.clear();
        match want {
            Logits::None => {}
            Logits::Last if n > 0 => scratch.head_rows.push(n - 1),
            Logits::Last => {}
            Logits::All => scratch.head_rows.extend(0..n),
        }
        self.step(scratch, &mut [seq], &[tokens])
    }

    /// Runs `tokens` like [`Model::forward`] (at positions `state.pos() ..`)
    /// and returns each position's final hidden state after the output norm
    /// (`[n][n_embd]`: transformers' last `hidden_states`), for embeddings.
    pub fn hidden_states(&self, s: &mut State, tokens: &[u32]) -> Result<Vec<f32>> {
        self.forward(s, tokens, Logits::None)?;
        let d = self.config.n_embd;
        let mut out = vec![0.0; tokens.len() * d];
        for (o, x) in out.chunks_exact_mut(d).zip(s.scratch.x.chunks_exact(d)) {
            ops::rmsnorm(o, x, &self.output_norm, self.config.rms_eps);
        }
        Ok(out)
    }

    /// One step for several sequences: `tokens[i]` (non-empty) is appended
    /// to `seqs[i]` at its next positions. Returns `[m][n_vocab]`: the logits
    /// of the last token of each sequence `i` with `want_logits[i]`, in order.
    ///
    /// Fails (changing no cache position) if a sequence would overflow its
    /// context or a token is outside the vocabulary.
    pub fn forward_batch<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        want_logits: &[bool],
    ) -> Result<&'s [f32]> {
        assert_eq!(seqs.len(), want_logits.len(), "one flag per sequence");
        let want: Vec<Logits> = want_logits
            .iter()
            .map(|&w| if w { Logits::Last } else { Logits::None })
            .collect();
        self.forward_batch_rows(s, seqs, tokens, &want)
    }

    /// [`Model::forward_batch`] with a choice of rows per sequence: the
    /// logits of sequence `i`'s last token ([`Logits::Last`]), of every one
    /// of its tokens ([`Logits::All`]: a speculative draft checked in the
    /// same step as other sequences' tokens) or none. Returns them in order,
    /// `[m][n_vocab]`.
    pub fn forward_batch_rows<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        want: &[Logits],
    ) -> Result<&'s [f32]> {
        assert_eq!(seqs.len(), tokens.len(), "one token slice per sequence");
        assert_eq!(seqs.len(), want.len(), "one choice per sequence");
        s.head_rows.clear();
        let mut end = 0;
        for (t, &w) in tokens.iter().zip(want) {
            let start = end;
            end += t.len();
            match w {
                Logits::None => {}
                Logits::Last if !t.is_empty() => s.head_rows.push(end - 1),
                Logits::Last => {}
                Logits::All => s.head_rows.extend(start..end),
            }
        }
        self.step(s, seqs, tokens)
    }

    /// The step both entry points share; `s.head_rows` says which rows'
    /// logits to compute.
    fn step<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        for (q, t) in seqs.iter().zip(tokens) {
            if q.pos + t.len() > q.n_ctx {
                return Err(Error::ContextFull {
                    needed: q.pos + t.len(),
                    capacity: q.n_ctx,
                });
            }
            if let Some(&id) = t.iter().find(|&&t| t as usize >= c.n_vocab) {
                return Err(Error::Token {
                    id,
                    n_vocab: c.n_vocab,
                });
            }
        }
        let n: usize = tokens.iter().map(|t| t.len()).sum();
        s.logits.clear();
        if n == 0 {
            return Ok(&s.logits);
        }
        let max_ctx = seqs.iter().map(|q| q.n_ctx).max().unwrap_or(0);
        self.reserve(s, n, max_ctx);
        s.row_seq.clear();
        s.row_pos.clear();
        for (i, (q, t)) in seqs.iter().zip(tokens).enumerate() {
            for j in 0..t.len() {
                s.row_seq.push(i);
                s.row_pos.push(q.pos + j);
            }
        }
        let (d, qd, kd, vd) = (c.n_embd, c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let att_w = c.n_head * c.head_dim_v;
        let r = c.n_rot;

        // Embedding lookup (and gemma's sqrt(n_embd) scale).
        for (t, &tok) in tokens.iter().flat_map(|t| t.iter()).enumerate() {
            let x = &mut s.x[t * d..(t + 1) * d];
            self.embd.row(tok as usize, x);
            if let Some(scale) = c.embed_scale {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
        // Rotary tables for this step's positions.
        for t in 0..n {
            let p = s.row_pos[t];
            self.rope_global
                .cos_sin(p, &mut s.cs_global[t * r..(t + 1) * r]);
            self.rope_swa.cos_sin(p, &mut s.cs_swa[t * r..(t + 1) * r]);
        }

        if let Some(g) = &self.g3n {
            self.gemma3n_layers(g, s, seqs, tokens, n)?;
        } else {
            for (l, layer) in self.layers.iter().enumerate() {
                // ---- attention ----
                for t in 0..n {
                    ops::rmsnorm(
                        &mut s.xb[t * d..(t + 1) * d],
                        &s.x[t * d..(t + 1) * d],
                        &layer.attn_norm,
                        c.rms_eps,
                    );
                }
                layer
                    .qkv
                    .matmul(&s.xb[..n * d], n, &mut s.qkv[..n * qkv_w], &mut s.tmp);
                self.prepare_qkv(layer, s, seqs, l, n, false, true);
                self.attention(s, seqs, l, layer.swa, n);
                layer.wo.matmul(&s.att[..n * att_w], n, &mut s.out[..n * d]);
                self.residual(s, n, layer.post_attn_norm.as_deref());

                // ---- feed-forward ----
                for t in 0..n {
                    ops::rmsnorm(
                        &mut s.xb[t * d..(t + 1) * d],
                        &s.x[t * d..(t + 1) * d],
                        &layer.ffn_norm,
                        c.rms_eps,
                    );
                }
                match &layer.ffn {
                    Ffn::Dense { gate_up, down } => {
                        let n_ff = c.n_ff;
                        gate_up.matmul(&s.xb[..n * d], n, &mut s.gu[..n * 2 * n_ff], &mut s.tmp);
                        for t in 0..n {
                            let (g, u) = s.gu[t * 2 * n_ff..(t + 1) * 2 * n_ff].split_at(n_ff);
                            glu(c.activation, g, u, &mut s.hb[t * n_ff..(t + 1) * n_ff]);
                        }
                        down.matmul(&s.hb[..n * n_ff], n, &mut s.out[..n * d]);
                    }
                    Ffn::Moe { router } => self.moe(s, l, router, n)?,
                }
                self.residual(s, n, layer.post_ffn_norm.as_deref());
            }
        }
        for (q, t) in seqs.iter_mut().zip(tokens) {
            q.pos += t.len();
        }

        // ---- head ----
        let m = s.head_rows.len();
        if m == 0 {
            return Ok(&s.logits);
        }
        for (i, &t) in s.head_rows.iter().enumerate() {
            ops::rmsnorm(
                &mut s.xb[i * d..(i + 1) * d],
                &s.x[t * d..(t + 1) * d],
                &self.output_norm,
                c.rms_eps,
            );
        }
        s.logits.resize(m * c.n_vocab, 0.0);
        self.output.matmul(&s.xb[..m * d], m, &mut s.logits);
        if let Some(cap) = c.final_softcap {
            s.logits
                .iter_mut()
                .for_each(|v| *v = cap * (*v / cap).tanh());
        }
        Ok(&s.logits)
    }

    /// The `n` rows' q‖k‖v in `s.qkv` made ready for attention: biases,
    /// per-head q and k RMS norms, gemma3n's weightless v norm (`v_norm`),
    /// rotary embeddings; then each row's k and v stored at its position in
    /// layer `l`'s cache — unless `store` is false (gemma3n's KV-sharing
    /// layers: queries only).
    #[allow(clippy::too_many_arguments)]
    fn prepare_qkv(
        &self,
        layer: &Layer,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        l: usize,
        n: usize,
        v_norm: bool,
        store: bool,
    ) {
        let c = &self.config;
        let (qd, kd, hd, r, eps) = (c.q_dim(), c.k_dim(), c.head_dim, c.n_rot, c.rms_eps);
        let qkv_w = qd + kd + c.v_dim();
        let (rope, cs) = if layer.swa {
            (&self.rope_swa, &s.cs_swa)
        } else {
            (&self.rope_global, &s.cs_global)
        };
        for t in 0..n {
            let row = &mut s.qkv[t * qkv_w..(t + 1) * qkv_w];
            if let Some(b) = &layer.qkv_bias {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
            let (q, rest) = row.split_at_mut(qd);
            let (k, v) = rest.split_at_mut(kd);
            if let Some(w) = &layer.q_norm {
                q.chunks_exact_mut(hd)
                    .for_each(|h| ops::rmsnorm_inplace(h, w, eps));
            }
            let cs_t = &cs[t * r..(t + 1) * r];
            rope.apply(q, hd, cs_t);
            if !store {
                continue;
            }
            if let Some(w) = &layer.k_norm {
                k.chunks_exact_mut(hd)
                    .for_each(|h| ops::rmsnorm_inplace(h, w, eps));
            }
            if v_norm {
                for h in v.chunks_exact_mut(c.head_dim_v) {
                    let inv = ops::rms_inv(h, eps);
                    h.iter_mut().for_each(|x| *x *= inv);
                }
            }
            rope.apply(k, hd, cs_t);
            let q_seq = &mut *seqs[s.row_seq[t]];
            let p = s.row_pos[t];
            q_seq.put_keys(c, l, p, k);
            q_seq.put_values(c, l, p, v);
        }
    }

    /// `x += norm(out)` for the `n` rows (the norm only where the block has
    /// one: gemma3's post-attention and post-FFN norms).
    fn residual(&self, s: &mut Scratch, n: usize, norm: Option<&[f32]>) {
        let d = self.config.n_embd;
        for t in 0..n {
            let o = &mut s.out[t * d..(t + 1) * d];
            if let Some(w) = norm {
                ops::rmsnorm_inplace(o, w, self.config.rms_eps);
            }
            s.x[t * d..(t + 1) * d]
                .iter_mut()
                .zip(o.iter())
                .for_each(|(x, o)| *x += o);
        }
    }

    /// The routed-experts FFN of layer `l` for the `n` rows of `s.xb`, into
    /// `s.out`.
    ///
    /// Routing as transformers' Qwen3MoeSparseMoeBlock and
    /// MixtralSparseMoeBlock (and llama.cpp's `build_moe_ffn` with softmax
    /// gating and normalized weights) define it: softmax over all experts'
    /// router logits, the `k` largest, weights divided by their sum. Then
    /// each routed expert runs ONCE on all the rows routed to it (one matmul
    /// per matrix), and each row adds `weight · expert(row)` in increasing
    /// expert order, as transformers' loop over experts does.
    fn moe(&self, s: &mut Scratch, l: usize, router: &[f32], n: usize) -> Result<()> {
        let c = &self.config;
        let store = self
            .experts
            .as_ref()
            .expect("MoE layers have an expert store");
        let (d, ne, k, ff) = (c.n_embd, c.n_expert, c.n_expert_used, c.n_ff_exp);
        if l == 0 {
            store.count_tokens(n);
        }
        s.routes.resize_with(ne, Vec::new);
        s.routes.iter_mut().for_each(Vec::clear);
        s.probs.resize(ne, 0.0);
        for t in 0..n {
            let x = &s.xb[t * d..(t + 1) * d];
            for (e, p) in s.probs.iter_mut().enumerate() {
                *p = ops::dot(&router[e * d..(e + 1) * d], x);
            }
            ops::softmax(&mut s.probs);
            // Top-k by probability (ties: the lower expert id first, as
            // torch.topk and ggml_argsort_top_k give for distinct values).
            let mut chosen = [(0usize, 0f32); crate::config::MAX_EXPERT_USED];
            let mut sum = 0f32;
            for slot in chosen.iter_mut().take(k) {
                let (best, &p) = s
                    .probs
                    .iter()
                    .enumerate()
                    .filter(|(e, _)| s.routes[*e].last().is_none_or(|r| r.0 != t))
                    .fold((usize::MAX, &f32::NEG_INFINITY), |a, b| {
                        if *b.1 > *a.1 {
                            b
                        } else {
                            a
                        }
                    });
                if best == usize::MAX {
                    break;
                }
                *slot = (best, p);
                sum += p;
                s.routes[best].push((t, p));
            }
            // Normalize this row's weights (they are the last entries).
            for &(e, _) in chosen.iter().take(k) {
                if let Some(r) = s.routes[e].last_mut().filter(|r| r.0 == t) {
                    r.1 /= sum;
                }
            }
        }
        s.out[..n * d].iter_mut().for_each(|v| *v = 0.0);
        for e in 0..ne {
            let m = s.routes[e].len();
            if m == 0 {
                continue;
            }
            let expert = store.get(l, e)?;
            let [gate, up, down] = expert.mats();
            s.moe_x.resize(m * d, 0.0);
            for (i, &(t, _)) in s.routes[e].iter().enumerate() {
                s.moe_x[i * d..(i + 1) * d].copy_from_slice(&s.xb[t * d..(t + 1) * d]);
            }
            s.moe_g.resize(m * ff, 0.0);
            s.moe_u.resize(m * ff, 0.0);
            s.moe_y.resize(m * d, 0.0);
            gate.matmul(&s.moe_x[..m * d], m, &mut s.moe_g[..m * ff]);
            up.matmul(&s.moe_x[..m * d], m, &mut s.moe_u[..m * ff]);
            for i in 0..m {
                let (g, u) = (
                    &s.moe_g[i * ff..(i + 1) * ff],
                    &mut s.moe_u[i * ff..(i + 1) * ff],
                );
                for (u, &g) in u.iter_mut().zip(g) {
                    *u *= match c.activation {
                        Activation::Silu => ops::silu(g),
                        Activation::GeluTanh => ops::gelu_tanh(g),
                    };
                }
            }
            down.matmul(&s.moe_u[..m * ff], m, &mut s.moe_y[..m * d]);
            for (i, &(t, w)) in s.routes[e].iter().enumerate() {
                s.out[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(&s.moe_y[i * d..(i + 1) * d])
                    .for_each(|(o, &y)| *o += w * y);
            }
        }
        Ok(())
    }

    /// Causal (optionally sliding-window) attention of the `n` rows in
    /// `s.qkv`, each over its own sequence's cache of layer `l`, into
    /// `s.att`. Work is split into (row, head) units run on the quant crate's
    /// pool; each task writes its own disjoint slice of `s.att` (one `Mutex`
    /// per task, never contended) and borrows a score buffer from
    /// `s.score_slots`.
    fn attention(&self, s: &mut Scratch, seqs: &[&mut Sequence], l: usize, swa: bool, n: usize) {
        let c = &self.config;
        let (hd, hdv) = (c.head_dim, c.head_dim_v);
        let (qd, kd, vd) = (c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let group = c.n_head / c.n_head_kv;
        let units = n * c.n_head;
        let pool = Pool::global();
        let per_task = units.div_ceil(pool.threads() * 4).max(1);
        let qkv = &s.qkv;
        let (row_seq, row_pos) = (&s.row_seq, &s.row_pos);
        let slots = &s.score_slots;
        let window = if swa { c.sliding_window } else { None };
        let chunks: Vec<Mutex<&mut [f32]>> = s.att[..units * hdv]
            .chunks_mut(per_task * hdv)
            .map(Mutex::new)
            .collect();
        let run = |task: usize| {
            let mut out = chunks[task].lock().unwrap_or_else(|e| e.into_inner());
            let mut slot = slots
                .iter()
                .find_map(|m| m.try_lock().ok())
                .expect("more concurrent attention tasks than score slots");
            let u0 = task * per_task;
            for (i, o) in out.chunks_exact_mut(hdv).enumerate() {
                let u = u0 + i;
                let (t, h) = (u / c.n_head, u % c.n_head);
                let q_seq = &*seqs[row_seq[t]];
                let nc = q_seq.n_ctx;
                let p = row_pos[t];
                let start = window.map_or(0, |w| (p + 1).saturating_sub(w));
                let kvh = h / group;
                let q = &qkv[t * qkv_w + h * hd..t * qkv_w + (h + 1) * hd];
                let sc = &mut slot[..p + 1 - start];
                // scores = (q · K[start..=p]) * scale over the transposed
                // cache, block by block (each position's sum is the same
                // whatever the blocks).
                let mut b0 = start;
                while b0 <= p {
                    let b1 = ((b0 / KB + 1) * KB).min(p + 1);
                    let base = q_seq.k_at(c, l, kvh, 0, b0 / KB * KB);
                    let out = &mut sc[b0 - start..b1 - start];
                    let kt = base..base + hd * KB;
                    q_seq.k_cache.scores(q, c.attn_scale, kt, b0 % KB, out);
                    b0 = b1;
                }
                if let Some(cap) = c.attn_softcap {
                    sc.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
                }
                ops::softmax(sc);
                let v0 = (l * nc + start) * vd + kvh * hdv;
                let v1 = (l + 1) * nc * vd;
                q_seq.v_cache.weighted_rows(sc, v0..v1, vd, o);
            }
        };
        // Small jobs (decode at short context) run on the caller: waking the
        // pool costs more than it saves below ~64K multiply-adds.
        let work: usize = (0..n).map(|t| row_pos[t] + 1).sum::<usize>() * c.n_head * (hd + hdv);
        if work < 1 << 16 || chunks.len() == 1 {
            (0..chunks.len()).for_each(run);
        } else {
            pool.run(chunks.len(), &run);
        }
    }
}

/// `h = act(g) · u` (SwiGLU or GeGLU). SiLU is `g / (1 + expf(-g))` with
/// the exponentials of the whole row taken 16 at a time
/// (`gpack_quant::kernels::attn::exp_inplace`: glibc's expf bit for bit, so
/// on glibc it equals [`ops::silu`] element by element).
fn glu(act: Activation, g: &[f32], u: &[f32], h: &mut [f32]) {
    match act {
        Activation::Silu => {
            h.iter_mut().zip(g).for_each(|(h, &g)| *h = -g);
            gpack_quant::kernels::attn::exp_inplace(h);
            h.iter_mut()
                .zip(g.iter().zip(u))
                .for_each(|(h, (&g, &u))| *h = g / (1.0 + *h) * u);
        }
        Activation::GeluTanh => h
            .iter_mut()
            .zip(g.iter().zip(u))
            .for_each(|(h, (&g, &u))| *h = ops::gelu_tanh(g) * u),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row-wise SiLU GLU equals `g / (1 + expf(-g)) * u` element by
    /// element (and `ops::silu(g) * u` where libm's expf is glibc's).
    #[test]
    fn silu_glu_equals_the_scalar_formula() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
        };
        for n in [1usize, 15, 16, 17, 100, 1536] {
            for scale in [0.5f32, 8.0, 120.0] {
                let mut g: Vec<f32> = (0..n).map(|_| next() * scale).collect();
                if n > 20 {
                    g[0] = -0.0;
                    g[1] = 100.0;
                    g[2] = -100.0;
                    g[3] = f32::INFINITY;
                }
                let u: Vec<f32> = (0..n).map(|_| next()).collect();
                let mut h = vec![0f32; n];
                glu(Activation::Silu, &g, &u, &mut h);
                for i in 0..n {
                    let want = ops::silu(g[i]) * u[i];
                    assert_eq!(
                        h[i].to_bits(),
                        want.to_bits(),
                        "n={n} g={} u={}",
                        g[i],
                        u[i]
                    );
                }
            }
        }
    }
}
