//! The transformer graph shared by llama, qwen2, qwen3 and gemma3.
//!
//! One graph with optional pieces, switched on by which tensors exist
//! (q/k/v biases: qwen2; per-head q/k norms: qwen3, gemma3; post-attention
//! and post-FFN norms: gemma3) and by [`Config`] (rope style, embedding
//! scale, activation, sliding-window layers, soft-capping). `forward` runs a
//! batch of tokens at consecutive positions: the prompt goes through as one
//! matrix (matrix-matrix kernels), decoding is the same code with `n = 1`.
//!
//! Tensor names are GGUF's (`llama.cpp/src/llama-arch.cpp`, LLM_TENSOR_NAMES).

use crate::config::{Activation, Config};
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Proj};
use crate::ops::{self, Rope};
use crate::weights::{to_f32_vec, TensorRef, WeightSource};
use gpack_quant::Pool;
use std::sync::Mutex;

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
    /// gate‖up: `[2 · n_ff] × n_embd`.
    gate_up: Proj<'a>,
    /// `n_embd × n_ff`.
    down: Matrix<'a>,
    /// `[n_embd]` norm of the FFN output (gemma3).
    post_ffn_norm: Option<Vec<f32>>,
    /// Sliding-window layer.
    swa: bool,
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

/// The per-sequence state: KV cache and scratch buffers. Everything a decode
/// step touches is allocated here once (and grown when a longer batch comes).
#[derive(Debug)]
pub struct State {
    /// Positions the cache holds.
    n_ctx: usize,
    /// Next position.
    pos: usize,
    /// `[n_layer][n_head_kv][head_dim][n_ctx]` keys (rotated), transposed so
    /// that q·K over all positions is a sequence of axpy's over contiguous
    /// positions (vectorizes without horizontal sums; see `attention`).
    k_cache: Vec<f32>,
    /// `[n_layer][n_ctx][v_dim]` values.
    v_cache: Vec<f32>,
    /// Batch capacity of the scratch buffers.
    cap: usize,
    /// `[n][n_embd]` residual stream.
    x: Vec<f32>,
    /// `[n][n_embd]` normed input of a projection.
    xb: Vec<f32>,
    /// `[n][q_dim + k_dim + v_dim]` q‖k‖v.
    qkv: Vec<f32>,
    /// `[n][n_head · head_dim_v]` attention output.
    att: Vec<f32>,
    /// `[n][n_embd]` block output before the residual add.
    out: Vec<f32>,
    /// `[n][2 · n_ff]` gate‖up.
    gu: Vec<f32>,
    /// `[n][n_ff]` activated FFN hidden.
    hb: Vec<f32>,
    /// `[n][n_rot]` cos/sin pairs of global layers.
    cs_global: Vec<f32>,
    /// `[n][n_rot]` cos/sin pairs of sliding-window layers.
    cs_swa: Vec<f32>,
    /// `[n_slots][n_ctx]` attention scores, one slot per concurrent task.
    score_slots: Vec<Mutex<Vec<f32>>>,
    /// Kernel scratch.
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    /// `[n_vocab]` or `[n][n_vocab]` logits of the last forward.
    logits: Vec<f32>,
}

impl State {
    /// Next position (= tokens in the cache).
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
    /// Logits of the last forward.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * 4
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

impl<'a> Model<'a> {
    /// Binds every tensor of `w` (no weight is copied, except the small
    /// norm/bias vectors, which are converted to f32).
    pub fn load(w: &'a dyn WeightSource) -> Result<Model<'a>> {
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
        let output_norm = need(
            dense_vec(w, "output_norm.weight", d, "norm")?,
            "output_norm.weight",
        )?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for l in 0..c.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}");
            let mat = |s: &str, cols: usize, rows: usize| -> Result<Matrix<'a>> {
                let name = n(s);
                Matrix::bind(&name, tensor(w, &name)?, cols, Some(rows))?.into_native(&name)
            };
            let qkv = Proj::new(vec![
                mat("attn_q.weight", d, c.q_dim())?,
                mat("attn_k.weight", d, c.k_dim())?,
                mat("attn_v.weight", d, c.v_dim())?,
            ]);
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
            let gate_up = Proj::new(vec![
                mat("ffn_gate.weight", d, c.n_ff)?,
                mat("ffn_up.weight", d, c.n_ff)?,
            ]);
            layers.push(Layer {
                attn_norm: need(
                    dense_vec(w, &n("attn_norm.weight"), d, "norm")?,
                    &n("attn_norm.weight"),
                )?,
                qkv,
                qkv_bias,
                q_norm: dense_vec(w, &n("attn_q_norm.weight"), c.head_dim, "norm")?,
                k_norm: dense_vec(w, &n("attn_k_norm.weight"), c.head_dim, "norm")?,
                wo: mat("attn_output.weight", c.n_head * c.head_dim_v, d)?,
                post_attn_norm: dense_vec(w, &n("post_attention_norm.weight"), d, "norm")?,
                ffn_norm: need(
                    dense_vec(w, &n("ffn_norm.weight"), d, "norm")?,
                    &n("ffn_norm.weight"),
                )?,
                gate_up,
                down: mat("ffn_down.weight", c.n_ff, d)?,
                post_ffn_norm: dense_vec(w, &n("post_ffw_norm.weight"), d, "norm")?,
                swa: c.swa_layers[l],
            });
        }
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
        })
    }

    /// Whether every layer's q‖k‖v and gate‖up run as single kernel calls.
    pub fn is_fused(&self) -> bool {
        self.layers
            .iter()
            .all(|l| l.qkv.is_fused() && l.gate_up.is_fused())
    }

    /// A fresh state with a KV cache of `n_ctx` positions.
    pub fn new_state(&self, n_ctx: usize) -> State {
        let c = &self.config;
        let slots = Pool::global().threads() + 1;
        State {
            n_ctx,
            pos: 0,
            k_cache: vec![0.0; c.n_layer * n_ctx * c.k_dim()],
            v_cache: vec![0.0; c.n_layer * n_ctx * c.v_dim()],
            cap: 0,
            x: Vec::new(),
            xb: Vec::new(),
            qkv: Vec::new(),
            att: Vec::new(),
            out: Vec::new(),
            gu: Vec::new(),
            hb: Vec::new(),
            cs_global: Vec::new(),
            cs_swa: Vec::new(),
            score_slots: (0..slots).map(|_| Mutex::new(vec![0.0; n_ctx])).collect(),
            tmp: Vec::new(),
            tmp2: Vec::new(),
            logits: Vec::new(),
        }
    }

    fn reserve(&self, s: &mut State, n: usize) {
        if s.cap >= n {
            return;
        }
        let c = &self.config;
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

    /// Runs `tokens` at positions `state.pos() ..`, appends them to the KV
    /// cache and returns the requested logits (`[n_vocab]` for
    /// [`Logits::Last`], `[n][n_vocab]` for [`Logits::All`]).
    pub fn forward<'s>(&self, s: &'s mut State, tokens: &[u32], want: Logits) -> Result<&'s [f32]> {
        let c = &self.config;
        let n = tokens.len();
        let p0 = s.pos;
        if p0 + n > s.n_ctx {
            return Err(Error::ContextFull {
                needed: p0 + n,
                capacity: s.n_ctx,
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(Error::Token {
                id,
                n_vocab: c.n_vocab,
            });
        }
        if n == 0 {
            s.logits.clear();
            return Ok(&s.logits);
        }
        self.reserve(s, n);
        let (d, qd, kd, vd) = (c.n_embd, c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let att_w = c.n_head * c.head_dim_v;
        let (hd, n_ff) = (c.head_dim, c.n_ff);

        // Embedding lookup (and gemma's sqrt(n_embd) scale).
        for (t, &tok) in tokens.iter().enumerate() {
            let x = &mut s.x[t * d..(t + 1) * d];
            self.embd.row(tok as usize, x);
            if let Some(scale) = c.embed_scale {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
        // Rotary tables for this batch's positions.
        for t in 0..n {
            let r = c.n_rot;
            self.rope_global
                .cos_sin(p0 + t, &mut s.cs_global[t * r..(t + 1) * r]);
            self.rope_swa
                .cos_sin(p0 + t, &mut s.cs_swa[t * r..(t + 1) * r]);
        }

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
            layer.qkv.matmul(
                &s.xb[..n * d],
                n,
                &mut s.qkv[..n * qkv_w],
                &mut s.tmp,
                &mut s.tmp2,
            );
            let (rope, cs) = if layer.swa {
                (&self.rope_swa, &s.cs_swa)
            } else {
                (&self.rope_global, &s.cs_global)
            };
            let k_layer = l * s.n_ctx * kd;
            let v_layer = l * s.n_ctx * vd;
            for t in 0..n {
                let row = &mut s.qkv[t * qkv_w..(t + 1) * qkv_w];
                if let Some(b) = &layer.qkv_bias {
                    row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
                let (q, rest) = row.split_at_mut(qd);
                let (k, v) = rest.split_at_mut(kd);
                if let Some(w) = &layer.q_norm {
                    q.chunks_exact_mut(hd)
                        .for_each(|h| ops::rmsnorm_inplace(h, w, c.rms_eps));
                }
                if let Some(w) = &layer.k_norm {
                    k.chunks_exact_mut(hd)
                        .for_each(|h| ops::rmsnorm_inplace(h, w, c.rms_eps));
                }
                let cs_t = &cs[t * c.n_rot..(t + 1) * c.n_rot];
                rope.apply(q, hd, cs_t);
                rope.apply(k, hd, cs_t);
                let p = p0 + t;
                for (i, &kv) in k.iter().enumerate() {
                    s.k_cache[k_layer + i * s.n_ctx + p] = kv;
                }
                s.v_cache[v_layer + p * vd..v_layer + (p + 1) * vd].copy_from_slice(v);
            }
            self.attention(s, l, layer.swa, p0, n);
            layer
                .wo
                .matmul(&s.att[..n * att_w], n, &mut s.out[..n * d], &mut s.tmp);
            for t in 0..n {
                let o = &mut s.out[t * d..(t + 1) * d];
                if let Some(w) = &layer.post_attn_norm {
                    ops::rmsnorm_inplace(o, w, c.rms_eps);
                }
                s.x[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(o.iter())
                    .for_each(|(x, o)| *x += o);
            }

            // ---- feed-forward ----
            for t in 0..n {
                ops::rmsnorm(
                    &mut s.xb[t * d..(t + 1) * d],
                    &s.x[t * d..(t + 1) * d],
                    &layer.ffn_norm,
                    c.rms_eps,
                );
            }
            layer.gate_up.matmul(
                &s.xb[..n * d],
                n,
                &mut s.gu[..n * 2 * n_ff],
                &mut s.tmp,
                &mut s.tmp2,
            );
            for t in 0..n {
                let (g, u) = s.gu[t * 2 * n_ff..(t + 1) * 2 * n_ff].split_at(n_ff);
                let h = &mut s.hb[t * n_ff..(t + 1) * n_ff];
                match c.activation {
                    Activation::Silu => h
                        .iter_mut()
                        .zip(g.iter().zip(u))
                        .for_each(|(h, (&g, &u))| *h = ops::silu(g) * u),
                    Activation::GeluTanh => h
                        .iter_mut()
                        .zip(g.iter().zip(u))
                        .for_each(|(h, (&g, &u))| *h = ops::gelu_tanh(g) * u),
                }
            }
            layer
                .down
                .matmul(&s.hb[..n * n_ff], n, &mut s.out[..n * d], &mut s.tmp);
            for t in 0..n {
                let o = &mut s.out[t * d..(t + 1) * d];
                if let Some(w) = &layer.post_ffn_norm {
                    ops::rmsnorm_inplace(o, w, c.rms_eps);
                }
                s.x[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(o.iter())
                    .for_each(|(x, o)| *x += o);
            }
        }
        s.pos = p0 + n;

        // ---- head ----
        let first = match want {
            Logits::None => {
                s.logits.clear();
                return Ok(&s.logits);
            }
            Logits::Last => n - 1,
            Logits::All => 0,
        };
        let m = n - first;
        for t in first..n {
            ops::rmsnorm(
                &mut s.xb[(t - first) * d..(t - first + 1) * d],
                &s.x[t * d..(t + 1) * d],
                &self.output_norm,
                c.rms_eps,
            );
        }
        s.logits.resize(m * c.n_vocab, 0.0);
        self.output
            .matmul(&s.xb[..m * d], m, &mut s.logits, &mut s.tmp);
        if let Some(cap) = c.final_softcap {
            s.logits
                .iter_mut()
                .for_each(|v| *v = cap * (*v / cap).tanh());
        }
        Ok(&s.logits)
    }

    /// Causal (optionally sliding-window) attention of the `n` queries in
    /// `s.qkv` over the cache of layer `l`, into `s.att`. Work is split into
    /// (token, head) units, run on the quant crate's pool; each task writes
    /// its own disjoint slice of `s.att` (one `Mutex` per task, never
    /// contended) and borrows a score buffer from `s.score_slots`.
    fn attention(&self, s: &mut State, l: usize, swa: bool, p0: usize, n: usize) {
        let c = &self.config;
        let (hd, hdv) = (c.head_dim, c.head_dim_v);
        let (qd, kd, vd) = (c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let group = c.n_head / c.n_head_kv;
        let units = n * c.n_head;
        let pool = Pool::global();
        let per_task = units.div_ceil(pool.threads() * 4).max(1);
        let n_ctx = s.n_ctx;
        let k_cache = &s.k_cache[l * n_ctx * kd..(l + 1) * n_ctx * kd];
        let v_cache = &s.v_cache[l * s.n_ctx * vd..(l + 1) * s.n_ctx * vd];
        let qkv = &s.qkv;
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
                let p = p0 + t;
                let start = window.map_or(0, |w| (p + 1).saturating_sub(w));
                let kvh = h / group;
                let q = &qkv[t * qkv_w + h * hd..t * qkv_w + (h + 1) * hd];
                let sc = &mut slot[..p + 1 - start];
                // scores = (q · K[start..=p]) * scale, as hd axpy's over the
                // transposed cache rows.
                let kt = &k_cache[kvh * hd * n_ctx..(kvh + 1) * hd * n_ctx];
                ops::scores_transposed(q, c.attn_scale, kt, n_ctx, start, sc);
                if let Some(cap) = c.attn_softcap {
                    sc.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
                }
                ops::softmax(sc);
                ops::weighted_rows(sc, &v_cache[start * vd + kvh * hdv..], vd, o);
            }
        };
        // Small jobs (decode at short context) run on the caller: waking the
        // pool costs more than it saves below ~64K multiply-adds.
        let work = units * (p0 + n) * (hd + hdv);
        if work < 1 << 16 || chunks.len() == 1 {
            (0..chunks.len()).for_each(run);
        } else {
            pool.run(chunks.len(), &run);
        }
    }
}
