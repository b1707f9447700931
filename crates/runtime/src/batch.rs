//! Multi-sequence forward for servers (continuous batching).
//!
//! [`BatchModel::forward_batch`] runs one step for several independent
//! sequences at once: every sequence contributes its next tokens (one while
//! decoding, a chunk of its prompt while prefilling) and all those rows go
//! through each matrix weight in ONE kernel call (`gpack_quant::matmul` reads
//! every weight row once for all rows), so decoding 8 streams costs about
//! one weight pass instead of 8. Attention is per row over that row's own
//! sequence cache ([`Sequence`]), so sequences never see each other.
//!
//! Why a second graph beside [`crate::Model`]: `Model`'s state holds exactly
//! one KV cache and its fields are private to `model.rs`, which is edited by
//! its owner in parallel; this file binds the same weights (no copy: native
//! views are borrowed, as in `Model::load`) and keeps the per-row layout a
//! batch of sequences needs. The arithmetic per row is the same as
//! `Model::forward`'s (same ops, same order), so a sequence decoded alone or
//! in a batch gives the same logits as long as the quant kernels give the
//! same row results for `n = 1` and `n > 1` (they do: the integer dot
//! products are exact and the per-row scaling is the same).

use crate::config::{Activation, Config};
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Proj};
use crate::ops::{self, Rope};
use crate::weights::{to_f32_vec, TensorRef, WeightSource};
use gpack_quant::Pool;
use std::sync::Mutex;

/// One transformer block's weights (as in `model.rs`).
#[derive(Debug)]
struct Layer<'a> {
    /// `[n_embd]` pre-attention RMS norm.
    attn_norm: Vec<f32>,
    /// q‖k‖v: `[q_dim + k_dim + v_dim] × n_embd`.
    qkv: Proj<'a>,
    /// `[q_dim + k_dim + v_dim]` biases, if any bias exists.
    qkv_bias: Option<Vec<f32>>,
    /// `[head_dim]` per-head q RMS norm.
    q_norm: Option<Vec<f32>>,
    /// `[head_dim]` per-head k RMS norm.
    k_norm: Option<Vec<f32>>,
    /// `n_embd × (n_head · head_dim_v)`.
    wo: Matrix<'a>,
    /// `[n_embd]` (gemma3).
    post_attn_norm: Option<Vec<f32>>,
    /// `[n_embd]` pre-FFN RMS norm.
    ffn_norm: Vec<f32>,
    /// gate‖up: `[2 · n_ff] × n_embd`.
    gate_up: Proj<'a>,
    /// `n_embd × n_ff`.
    down: Matrix<'a>,
    /// `[n_embd]` (gemma3).
    post_ffn_norm: Option<Vec<f32>>,
    /// Sliding-window layer.
    swa: bool,
}

/// A model bound for batched multi-sequence decoding.
#[derive(Debug)]
pub struct BatchModel<'a> {
    /// Hyperparameters.
    pub config: Config,
    /// `n_vocab × n_embd`.
    embd: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    /// `[n_embd]`.
    output_norm: Vec<f32>,
    /// `n_vocab × n_embd` (the embedding when tied).
    output: Matrix<'a>,
    rope_global: Rope,
    rope_swa: Rope,
}

/// One sequence's KV cache.
#[derive(Debug)]
pub struct Sequence {
    n_ctx: usize,
    pos: usize,
    /// `[n_layer][n_head_kv][head_dim][n_ctx]` keys, transposed (as `State`).
    k_cache: Vec<f32>,
    /// `[n_layer][n_ctx][v_dim]` values.
    v_cache: Vec<f32>,
}

impl Sequence {
    /// Tokens in the cache (= the next position).
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Empties the cache (the buffers are kept for the next sequence).
    pub fn reset(&mut self) {
        self.pos = 0;
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * 4
    }
}

/// Scratch of [`BatchModel::forward_batch`], grown to the largest step seen.
#[derive(Debug, Default)]
pub struct BatchScratch {
    cap: usize,
    /// `[rows][n_embd]` residual stream.
    x: Vec<f32>,
    /// `[rows][n_embd]` normed input.
    xb: Vec<f32>,
    /// `[rows][q_dim + k_dim + v_dim]`.
    qkv: Vec<f32>,
    /// `[rows][n_head · head_dim_v]`.
    att: Vec<f32>,
    /// `[rows][n_embd]`.
    out: Vec<f32>,
    /// `[rows][2 · n_ff]`.
    gu: Vec<f32>,
    /// `[rows][n_ff]`.
    hb: Vec<f32>,
    /// `[rows][n_rot]` cos/sin of global layers.
    cs_global: Vec<f32>,
    /// `[rows][n_rot]` cos/sin of sliding-window layers.
    cs_swa: Vec<f32>,
    /// `[rows]` which sequence each row belongs to.
    row_seq: Vec<usize>,
    /// `[rows]` position of each row in its sequence.
    row_pos: Vec<usize>,
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    /// `[m][n_vocab]` logits of the last step.
    logits: Vec<f32>,
}

impl BatchScratch {
    /// `[m][n_vocab]` logits of the last [`BatchModel::forward_batch`].
    pub fn logits(&self) -> &[f32] {
        &self.logits
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

impl<'a> BatchModel<'a> {
    /// Binds every tensor of `w` (as `Model::load`: no weight is copied
    /// except the small norm/bias vectors).
    pub fn load(w: &'a dyn WeightSource) -> Result<BatchModel<'a>> {
        let embd_t = tensor(w, "token_embd.weight")?;
        let n_vocab = embd_t.dims().get(1).copied().unwrap_or(0) as usize;
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
        Ok(BatchModel {
            config,
            embd,
            layers,
            output_norm,
            output,
            rope_global,
            rope_swa,
        })
    }

    /// An empty sequence with a KV cache of `n_ctx` positions.
    pub fn new_sequence(&self, n_ctx: usize) -> Sequence {
        let c = &self.config;
        Sequence {
            n_ctx,
            pos: 0,
            k_cache: vec![0.0; c.n_layer * n_ctx * c.k_dim()],
            v_cache: vec![0.0; c.n_layer * n_ctx * c.v_dim()],
        }
    }

    fn reserve(&self, s: &mut BatchScratch, n: usize) {
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

    /// One step for several sequences: `tokens[i]` (non-empty) is appended to
    /// `seqs[i]` at its next positions. Returns `[m][n_vocab]`: the logits of
    /// the last token of each sequence `i` with `want_logits[i]`, in order.
    ///
    /// Fails (changing no cache) if a sequence would overflow its context or
    /// a token is outside the vocabulary.
    pub fn forward_batch<'s>(
        &self,
        s: &'s mut BatchScratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        want_logits: &[bool],
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        assert_eq!(seqs.len(), tokens.len(), "one token slice per sequence");
        assert_eq!(seqs.len(), want_logits.len(), "one flag per sequence");
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
        self.reserve(s, n);
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
        let (hd, n_ff, r) = (c.head_dim, c.n_ff, c.n_rot);

        for (t, &tok) in tokens.iter().flat_map(|t| t.iter()).enumerate() {
            let x = &mut s.x[t * d..(t + 1) * d];
            self.embd.row(tok as usize, x);
            if let Some(scale) = c.embed_scale {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
        for t in 0..n {
            let p = s.row_pos[t];
            self.rope_global
                .cos_sin(p, &mut s.cs_global[t * r..(t + 1) * r]);
            self.rope_swa.cos_sin(p, &mut s.cs_swa[t * r..(t + 1) * r]);
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
            for t in 0..n {
                let q_seq = &mut *seqs[s.row_seq[t]];
                let nc = q_seq.n_ctx;
                let p = s.row_pos[t];
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
                let cs_t = &cs[t * r..(t + 1) * r];
                rope.apply(q, hd, cs_t);
                rope.apply(k, hd, cs_t);
                let k_layer = l * nc * kd;
                let v_layer = l * nc * vd;
                for (i, &kv) in k.iter().enumerate() {
                    q_seq.k_cache[k_layer + i * nc + p] = kv;
                }
                q_seq.v_cache[v_layer + p * vd..v_layer + (p + 1) * vd].copy_from_slice(v);
            }
            self.attention(s, seqs, l, layer.swa, n);
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
        for (q, t) in seqs.iter_mut().zip(tokens) {
            q.pos += t.len();
        }

        // ---- head: the last row of each sequence that wants logits ----
        let mut m = 0;
        let mut end = 0;
        for (t, &want) in tokens.iter().zip(want_logits) {
            end += t.len();
            if want {
                let last = end - 1;
                ops::rmsnorm(
                    &mut s.out[m * d..(m + 1) * d],
                    &s.x[last * d..(last + 1) * d],
                    &self.output_norm,
                    c.rms_eps,
                );
                m += 1;
            }
        }
        if m == 0 {
            return Ok(&s.logits);
        }
        s.logits.resize(m * c.n_vocab, 0.0);
        self.output
            .matmul(&s.out[..m * d], m, &mut s.logits, &mut s.tmp);
        if let Some(cap) = c.final_softcap {
            s.logits
                .iter_mut()
                .for_each(|v| *v = cap * (*v / cap).tanh());
        }
        Ok(&s.logits)
    }

    /// Attention of the `n` rows in `s.qkv`, each over its own sequence's
    /// cache of layer `l`, into `s.att`; (row, head) units on the pool.
    fn attention(
        &self,
        s: &mut BatchScratch,
        seqs: &[&mut Sequence],
        l: usize,
        swa: bool,
        n: usize,
    ) {
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
        let window = if swa { c.sliding_window } else { None };
        let max_ctx = seqs.iter().map(|q| q.n_ctx).max().unwrap_or(0);
        let chunks: Vec<Mutex<&mut [f32]>> = s.att[..units * hdv]
            .chunks_mut(per_task * hdv)
            .map(Mutex::new)
            .collect();
        let run = |task: usize| {
            let mut out = chunks[task].lock().unwrap_or_else(|e| e.into_inner());
            let mut sc_buf = vec![0f32; max_ctx];
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
                let sc = &mut sc_buf[..p + 1 - start];
                let k_cache = &q_seq.k_cache[l * nc * kd..(l + 1) * nc * kd];
                let v_cache = &q_seq.v_cache[l * nc * vd..(l + 1) * nc * vd];
                let kt = &k_cache[kvh * hd * nc..(kvh + 1) * hd * nc];
                ops::scores_transposed(q, c.attn_scale, kt, nc, start, sc);
                if let Some(cap) = c.attn_softcap {
                    sc.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
                }
                ops::softmax(sc);
                ops::weighted_rows(sc, &v_cache[start * vd + kvh * hdv..], vd, o);
            }
        };
        let work: usize = (0..n).map(|t| row_pos[t] + 1).sum::<usize>() * c.n_head * (hd + hdv);
        if work < 1 << 16 || chunks.len() == 1 {
            (0..chunks.len()).for_each(run);
        } else {
            pool.run(chunks.len(), &run);
        }
    }
}
