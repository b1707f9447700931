//! The Gemma 3n text graph: the one family whose tokens read a row of a
//! per-layer embedding (PLE) table.
//!
//! Follows transformers' `Gemma3nTextModel` / `Gemma3nTextDecoderLayer`
//! (5.x, `modeling_gemma3n.py`) operation by operation, with GGUF tensor
//! names (llama.cpp `LLM_ARCH_GEMMA3N`):
//!
//! * per-layer inputs: the token's PLE row (`per_layer_token_embd`, `[n_layer ·
//!   n_embd_per_layer]`, × sqrt(n_embd_per_layer)) plus the RMS-normed
//!   projection of the embedding (`per_layer_model_proj` × n_embd^-0.5,
//!   `per_layer_proj_norm`), times 1/sqrt(2);
//! * AltUp: the residual stream is `n_altup` streams (the scaled embedding and
//!   `altup_proj` projections of it rescaled to its RMS); each layer predicts
//!   all streams from a router over stream 0 (`altup_router_norm`,
//!   `altup_router`, tanh, `altup_predict_coef`), computes attention, Laurel
//!   and the FFN on stream 0, and corrects every stream with the innovation
//!   (`altup_correct_coef` + 1); the corrected stream 0, scaled by
//!   `altup_correct_scale`, gates the layer's per-layer input (`inp_gate`,
//!   GELU, `proj`, `post_norm`) into streams 1.. ;
//! * Laurel: `x + norm(laurel_r(laurel_l(x)))` beside attention;
//! * attention: q and k RMS-normed per head, v RMS-normed without weight,
//!   scale 1; the last `shared_kv_layers` layers attend over the K/V cache
//!   of the last earlier layer of their kind (sliding or global);
//! * FFN: GeGLU whose gate is sparsified in the first layers by a gaussian
//!   top-k (`relu(g - (mean(g) + std(g) · icdf(p)))`);
//! * output: streams 1.. un-projected (`altup_unembd_proj`) and rescaled to
//!   stream 0's RMS, averaged, normed, tied head, soft-capped.
//!
//! The PLE table is read a row per token: from the `.gpack` Ple section
//! through [`PleTable`] (direct I/O with a set-associative row cache, or
//! mmap), or from the tensor of a GGUF/HF source. [`PleStats`] counts rows
//! and cache hits; `gpack run --verbose` prints them.

use super::{glu, matrix, norm_rows, required_vec, tensor, Ffn, Model, Scratch, Sequence};
use crate::config::Gemma3nConfig;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops;
use crate::ple::{CacheStats, PleIo, PleTable};
use crate::weights::WeightSource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where the PLE rows come from.
enum PleRows<'a> {
    /// The Ple section of a `.gpack` (direct I/O + row cache, or mmap).
    Table(Box<Mutex<PleTable>>),
    /// A tensor of the weight source (GGUF, HF, `.giw`), read in place.
    Tensor(Matrix<'a>),
}

/// How the PLE rows are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PleMode {
    /// `O_DIRECT` reads (or the buffered fallback: `o_direct` false) behind a
    /// `sets × ways` row cache.
    Direct {
        /// Cache sets.
        sets: usize,
        /// Rows per set.
        ways: usize,
        /// Whether the filesystem took `O_DIRECT`.
        o_direct: bool,
    },
    /// Slices of a mapping of the Ple section.
    Mmap,
    /// The table is an ordinary tensor of the source file (GGUF, HF, .giw).
    Tensor,
}

/// PLE counters of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PleStats {
    /// How rows are read.
    pub mode: PleMode,
    /// Rows looked up (one per token).
    pub rows_read: u64,
    /// Row-cache hits and misses (direct mode; zero otherwise).
    pub cache: CacheStats,
    /// Rows in the table.
    pub rows: u64,
    /// Bytes per row in the file.
    pub row_bytes: usize,
}

struct Layer<'a> {
    inp_gate: Matrix<'a>,
    proj: Matrix<'a>,
    post_norm: Vec<f32>,
    /// `[n_altup][n_altup]` (out, in).
    correct_coef: Vec<f32>,
    correct_scale: Vec<f32>,
    /// `[n_altup²][n_altup]` (out, in).
    predict_coef: Vec<f32>,
    /// `n_altup × n_embd`.
    router: Matrix<'a>,
    router_norm: Vec<f32>,
    laurel_l: Matrix<'a>,
    laurel_r: Matrix<'a>,
    laurel_post_norm: Vec<f32>,
}

/// Gemma 3n's weights beside the common per-layer ones.
pub(crate) struct Gemma3n<'a> {
    cfg: Gemma3nConfig,
    ple: PleRows<'a>,
    ple_rows: u64,
    ple_row_bytes: usize,
    rows_read: AtomicU64,
    /// `(n_layer · n_embd_per_layer) × n_embd`.
    model_proj: Matrix<'a>,
    proj_norm: Vec<f32>,
    /// `((n_altup − 1) · n_embd) × n_embd`: all stream projections of the
    /// embedding in one matrix.
    altup_proj: Matrix<'a>,
    /// One `n_embd × n_embd` un-projection per stream 1.. .
    unembd: Vec<Matrix<'a>>,
    layers: Vec<Layer<'a>>,
}

impl std::fmt::Debug for Gemma3n<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemma3n")
            .field("cfg", &self.cfg)
            .field("ple_rows", &self.ple_rows)
            .finish_non_exhaustive()
    }
}

/// Gemma 3n's step buffers.
#[derive(Debug, Default)]
pub(crate) struct G3nScratch {
    /// `[n][n_altup][n_embd]` the streams.
    alt: Vec<f32>,
    /// `[n][n_altup][n_embd]` the predictions of one layer.
    pred: Vec<f32>,
    /// `[n][n_layer][n_embd_per_layer]` per-layer inputs.
    ple: Vec<f32>,
    /// `[n][max(n_layer · n_embd_per_layer, (n_altup−1) · n_embd)]` matmul outputs.
    big: Vec<f32>,
    /// `[n][n_embd]` Laurel output, then the activated stream.
    lau: Vec<f32>,
    /// `[n][n_embd]` stream 0 before the layer (the active prediction).
    act: Vec<f32>,
    /// `[n][…]` small projections (router, Laurel rank, per-layer gate).
    small: Vec<f32>,
    small2: Vec<f32>,
    /// `[n_layer · n_embd_per_layer]` one dequantized PLE row.
    row: Vec<f32>,
    /// `[n][q_dim]` queries of KV-sharing layers.
    q: Vec<f32>,
    /// `[n][n_embd]` router inputs.
    rin: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// `sqrt(mean(x²))` as transformers computes the AltUp target magnitude.
fn rms(x: &[f32]) -> f32 {
    (ops::dot(x, x) / x.len() as f32).sqrt()
}

impl<'a> Gemma3n<'a> {
    /// Binds Gemma 3n's own tensors.
    pub(crate) fn load(
        w: &'a dyn WeightSource,
        cfg: &Gemma3nConfig,
        n_embd: usize,
        n_layer: usize,
        ple_io: PleIo,
    ) -> Result<Gemma3n<'a>> {
        let d = n_embd;
        let (hpl, na) = (cfg.n_embd_per_layer, cfg.n_altup);
        let mat = |name: &str, cols: usize, rows: usize| matrix(w, name, cols, rows);
        let vec = |name: &str, len: usize, what: &'static str| required_vec(w, name, len, what);
        let ple_name = "per_layer_token_embd.weight";
        let (ple, ple_rows, ple_row_bytes) = match w.ple_table(ple_io) {
            Some(t) => {
                let t = t?;
                if t.ne0() != (n_layer * hpl) as u64 {
                    return Err(Error::Shape {
                        name: ple_name.into(),
                        expected: vec![(n_layer * hpl) as u64],
                        found: vec![t.ne0(), t.rows()],
                    });
                }
                let (rows, rb) = (t.rows(), t.row_bytes());
                (PleRows::Table(Box::new(Mutex::new(t))), rows, rb)
            }
            None => {
                let m = Matrix::bind(ple_name, tensor(w, ple_name)?, n_layer * hpl, None)?;
                let (rows, rb) = (m.rows() as u64, m.row_bytes());
                (PleRows::Tensor(m), rows, rb)
            }
        };
        if ple_rows == 0 {
            return Err(Error::Shape {
                name: ple_name.into(),
                expected: vec![(n_layer * hpl) as u64, 1],
                found: vec![(n_layer * hpl) as u64, 0],
            });
        }
        let unembd_name = "altup_unembd_proj.weight";
        let unembd = Matrix::bind(unembd_name, tensor(w, unembd_name)?, d, Some((na - 1) * d))?
            .split_rows(na - 1)
            .ok_or_else(|| Error::MissingTensor {
                name: unembd_name.into(),
            })?
            .into_iter()
            .map(|m| m.into_native(unembd_name))
            .collect::<Result<Vec<_>>>()?;
        let mut layers = Vec::with_capacity(n_layer);
        for l in 0..n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let rank_t = tensor(w, &n("laurel_l"))?;
            let rank = rank_t.dims().get(1).copied().unwrap_or(0) as usize;
            if rank == 0 {
                return Err(Error::Shape {
                    name: n("laurel_l"),
                    expected: vec![d as u64, 1],
                    found: rank_t.dims(),
                });
            }
            layers.push(Layer {
                inp_gate: mat(&n("inp_gate"), d, hpl)?,
                proj: mat(&n("proj"), hpl, d)?,
                post_norm: vec(&n("post_norm"), d, "norm")?,
                correct_coef: vec(&n("altup_correct_coef"), na * na, "altup coefficients")?,
                correct_scale: vec(&n("altup_correct_scale"), d, "altup scale")?,
                predict_coef: vec(&n("altup_predict_coef"), na * na * na, "altup coefficients")?,
                router: mat(&n("altup_router"), d, na)?,
                router_norm: vec(&n("altup_router_norm"), d, "norm")?,
                laurel_l: mat(&n("laurel_l"), d, rank)?,
                laurel_r: mat(&n("laurel_r"), rank, d)?,
                laurel_post_norm: vec(&n("laurel_post_norm"), d, "norm")?,
            });
        }
        Ok(Gemma3n {
            cfg: cfg.clone(),
            ple,
            ple_rows,
            ple_row_bytes,
            rows_read: AtomicU64::new(0),
            model_proj: mat("per_layer_model_proj.weight", d, n_layer * hpl)?,
            proj_norm: vec("per_layer_proj_norm.weight", hpl, "norm")?,
            altup_proj: mat("altup_proj.weight", d, (na - 1) * d)?,
            unembd,
            layers,
        })
    }

    /// The PLE counters.
    pub(crate) fn stats(&self) -> PleStats {
        let (mode, cache) = match &self.ple {
            PleRows::Table(t) => {
                let t = t.lock().unwrap_or_else(|e| e.into_inner());
                let mode = match t.io() {
                    PleIo::Mmap => PleMode::Mmap,
                    PleIo::Direct { sets, ways } => PleMode::Direct {
                        sets,
                        ways,
                        o_direct: t.is_direct(),
                    },
                };
                (mode, t.stats())
            }
            PleRows::Tensor(_) => (PleMode::Tensor, CacheStats::default()),
        };
        PleStats {
            mode,
            rows_read: self.rows_read.load(Ordering::Relaxed),
            cache,
            rows: self.ple_rows,
            row_bytes: self.ple_row_bytes,
        }
    }

    /// Dequantizes the PLE row of `token` into `out` (`[n_layer · hpl]`).
    /// Ids past the table read row 0, as transformers' `get_per_layer_inputs`.
    fn ple_row(&self, token: u32, out: &mut [f32]) -> Result<()> {
        let r = if u64::from(token) < self.ple_rows {
            u64::from(token)
        } else {
            0
        };
        self.rows_read.fetch_add(1, Ordering::Relaxed);
        match &self.ple {
            PleRows::Tensor(m) => {
                m.row(r as usize, out);
                Ok(())
            }
            PleRows::Table(t) => {
                let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                let ty = t.ggml_type();
                let bytes = t.row(r)?;
                gpack_quant::dequantize_ggml(ty, bytes, out).map_err(|e| Error::Quant {
                    name: "per_layer_token_embd.weight".into(),
                    source: e,
                })
            }
        }
    }
}

impl<'a> Model<'a> {
    /// Gemma 3n's layers for the `n` rows whose scaled embeddings are in
    /// `s.x`; leaves the merged, un-normed hidden state of each row in `s.x`
    /// (the common head then applies the final norm, the head and the cap).
    pub(crate) fn gemma3n_layers(
        &self,
        g: &Gemma3n<'a>,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        n: usize,
    ) -> Result<()> {
        let c = &self.config;
        let (d, nl, eps) = (c.n_embd, c.n_layer, c.rms_eps);
        let (hpl, na) = (g.cfg.n_embd_per_layer, g.cfg.n_altup);
        let (qd, kd, vd) = (c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let pl = nl * hpl;
        let big_w = pl.max((na - 1) * d);
        {
            let gs = &mut s.g3n;
            grow(&mut gs.alt, n * na * d);
            grow(&mut gs.pred, n * na * d);
            grow(&mut gs.ple, n * pl);
            grow(&mut gs.big, n * big_w);
            grow(&mut gs.lau, n * d);
            grow(&mut gs.act, n * d);
            grow(&mut gs.row, pl);
            grow(&mut gs.q, n * qd);
        }

        // ---- per-layer inputs ----
        // Scales as transformers builds them: Python floats rounded to f32.
        let ple_scale = (hpl as f64).sqrt() as f32;
        for (t, &tok) in tokens.iter().flat_map(|t| t.iter()).enumerate() {
            let gs = &mut s.g3n;
            g.ple_row(tok, &mut gs.row[..pl])?;
            for (o, &v) in gs.ple[t * pl..(t + 1) * pl].iter_mut().zip(&gs.row[..pl]) {
                *o = v * ple_scale;
            }
        }
        g.model_proj
            .matmul(&self.pool, &s.x[..n * d], n, &mut s.g3n.big[..n * pl]);
        let proj_scale = (d as f64).powf(-0.5) as f32;
        let input_scale = 1.0 / 2f32.sqrt();
        for t in 0..n {
            let gs = &mut s.g3n;
            for l in 0..nl {
                let p = &mut gs.big[t * pl + l * hpl..t * pl + (l + 1) * hpl];
                p.iter_mut().for_each(|v| *v *= proj_scale);
                ops::rmsnorm_inplace(p, &g.proj_norm, eps);
                let e = &mut gs.ple[t * pl + l * hpl..t * pl + (l + 1) * hpl];
                for (e, &p) in e.iter_mut().zip(p.iter()) {
                    *e = (p + *e) * input_scale;
                }
            }
        }

        // ---- AltUp streams from the embedding ----
        let wa = (na - 1) * d;
        g.altup_proj
            .matmul(&self.pool, &s.x[..n * d], n, &mut s.g3n.big[..n * wa]);
        for t in 0..n {
            let gs = &mut s.g3n;
            let h0 = &s.x[t * d..(t + 1) * d];
            let target = rms(h0);
            let alt = &mut gs.alt[t * na * d..(t + 1) * na * d];
            alt[..d].copy_from_slice(h0);
            for i in 1..na {
                let a = &gs.big[t * wa + (i - 1) * d..t * wa + i * d];
                let mag = (ops::dot(a, a) / d as f32).max(1e-5).sqrt();
                for (o, &v) in alt[i * d..(i + 1) * d].iter_mut().zip(a) {
                    *o = v * target / mag;
                }
            }
        }

        for (l, (layer, gl)) in self.layers.iter().zip(&g.layers).enumerate() {
            let kv_src = g.cfg.kv_source[l];
            let shared = kv_src != l;
            // ---- AltUp predict ----
            self.altup_modalities(gl, s, n, na, false);
            for t in 0..n {
                let gs = &mut s.g3n;
                let m = &gs.small[t * na..(t + 1) * na];
                let alt = &gs.alt[t * na * d..(t + 1) * na * d];
                let pred = &mut gs.pred[t * na * d..(t + 1) * na * d];
                // coefs[j][i] = predict_coef · m, out index j·na + i.
                let mut coef = [0f32; 256];
                for (o, row) in coef
                    .iter_mut()
                    .zip(gl.predict_coef.chunks_exact(na))
                    .take(na * na)
                {
                    *o = row.iter().zip(m).fold(0f32, |a, (&w, &x)| a + w * x);
                }
                for j in 0..na {
                    let pj = &mut pred[j * d..(j + 1) * d];
                    for (k, o) in pj.iter_mut().enumerate() {
                        let mut acc = 0f32;
                        for i in 0..na {
                            acc += alt[i * d + k] * coef[j * na + i];
                        }
                        *o = acc + alt[j * d + k];
                    }
                }
                s.g3n.act[t * d..(t + 1) * d]
                    .copy_from_slice(&s.g3n.pred[t * na * d..t * na * d + d]);
            }
            // ---- input norm, Laurel ----
            norm_rows(
                &self.pool,
                &mut s.xb,
                &s.g3n.act,
                d,
                n,
                layer.attn_norm.as_deref(),
                eps,
            );
            let rank = gl.laurel_l.rows();
            grow(&mut s.g3n.small2, n * rank);
            gl.laurel_l
                .matmul(&self.pool, &s.xb[..n * d], n, &mut s.g3n.small2[..n * rank]);
            gl.laurel_r.matmul(
                &self.pool,
                &s.g3n.small2[..n * rank],
                n,
                &mut s.g3n.lau[..n * d],
            );
            for t in 0..n {
                let lau = &mut s.g3n.lau[t * d..(t + 1) * d];
                ops::rmsnorm_inplace(lau, &gl.laurel_post_norm, eps);
                for (o, &x) in lau.iter_mut().zip(&s.xb[t * d..(t + 1) * d]) {
                    *o += x;
                }
            }
            // ---- attention ----
            if shared {
                layer.qkv.matmul(
                    &self.pool,
                    &s.xb[..n * d],
                    n,
                    &mut s.g3n.q[..n * qd],
                    &mut s.tmp,
                );
                for t in 0..n {
                    s.qkv[t * qkv_w..t * qkv_w + qd]
                        .copy_from_slice(&s.g3n.q[t * qd..(t + 1) * qd]);
                }
            } else {
                layer.qkv.matmul(
                    &self.pool,
                    &s.xb[..n * d],
                    n,
                    &mut s.qkv[..n * qkv_w],
                    &mut s.tmp,
                );
            }
            let prep = super::attention::QkvPrep {
                v_norm: true,
                store_kv: !shared,
            };
            self.prepare_qkv(layer, s, seqs, l, n, prep);
            self.attention(s, seqs, kv_src, layer.swa, None, n);
            let att_w = c.n_head * c.head_dim_v;
            layer
                .wo
                .matmul(&self.pool, &s.att[..n * att_w], n, &mut s.out[..n * d]);
            let sqrt2 = 2f32.sqrt();
            for t in 0..n {
                let o = &mut s.out[t * d..(t + 1) * d];
                if let Some(w) = &layer.post_attn_norm {
                    ops::rmsnorm_inplace(o, w, eps);
                }
                // attn_laurel = (active + attn + laurel) / sqrt(2), in s.x.
                let a = &s.g3n.act[t * d..(t + 1) * d];
                let lau = &s.g3n.lau[t * d..(t + 1) * d];
                for (k, x) in s.x[t * d..(t + 1) * d].iter_mut().enumerate() {
                    *x = ((a[k] + o[k]) + lau[k]) / sqrt2;
                }
            }
            // ---- FFN (gaussian top-k gate in the sparse layers) ----
            norm_rows(
                &self.pool,
                &mut s.xb,
                &s.x,
                d,
                n,
                layer.ffn_norm.as_deref(),
                eps,
            );
            let Ffn::Dense { gate_up, down } = &layer.ffn else {
                return Err(Error::Architecture {
                    arch: "gemma3n with routed experts".into(),
                });
            };
            let n_ff = c.n_ff;
            gate_up.matmul(
                &self.pool,
                &s.xb[..n * d],
                n,
                &mut s.gu[..n * 2 * n_ff],
                &mut s.tmp,
            );
            let sparsity = g.cfg.sparsity[l];
            for t in 0..n {
                let (gt, u) = s.gu[t * 2 * n_ff..(t + 1) * 2 * n_ff].split_at_mut(n_ff);
                if let Some(mult) = sparsity {
                    let mean = gt.iter().map(|&v| f64::from(v)).sum::<f64>() / n_ff as f64;
                    let var = gt
                        .iter()
                        .map(|&v| (f64::from(v) - mean).powi(2))
                        .sum::<f64>()
                        / n_ff as f64;
                    let cutoff = mean as f32 + var.sqrt() as f32 * mult;
                    gt.iter_mut().for_each(|v| *v = (*v - cutoff).max(0.0));
                }
                glu(c.activation, gt, u, &mut s.hb[t * n_ff..(t + 1) * n_ff]);
            }
            down.matmul(&self.pool, &s.hb[..n * n_ff], n, &mut s.out[..n * d]);
            for t in 0..n {
                let o = &mut s.out[t * d..(t + 1) * d];
                if let Some(w) = &layer.post_ffn_norm {
                    ops::rmsnorm_inplace(o, w, eps);
                }
                // activated = attn_laurel + ffn, into lau.
                let lau = &mut s.g3n.lau[t * d..(t + 1) * d];
                for ((a, &x), &f) in lau.iter_mut().zip(&s.x[t * d..(t + 1) * d]).zip(o.iter()) {
                    *a = x + f;
                }
            }
            // ---- AltUp correct ----
            self.altup_modalities(gl, s, n, na, true);
            for t in 0..n {
                let gs = &mut s.g3n;
                let m = &gs.small[t * na..(t + 1) * na];
                let mut cc = [0f32; 16];
                for (o, row) in cc.iter_mut().zip(gl.correct_coef.chunks_exact(na)) {
                    *o = row.iter().zip(m).fold(0f32, |a, (&w, &x)| a + w * x) + 1.0;
                }
                let act = &gs.lau[t * d..(t + 1) * d];
                let pred = &gs.pred[t * na * d..(t + 1) * na * d];
                let alt = &mut gs.alt[t * na * d..(t + 1) * na * d];
                for j in 0..na {
                    for k in 0..d {
                        let innovation = act[k] - pred[k];
                        alt[j * d + k] = innovation * cc[j] + pred[j * d + k];
                    }
                }
                // first = corrected[0] · correct_scale, into xb.
                for ((o, &a), &sc) in s.xb[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(&alt[..d])
                    .zip(&gl.correct_scale)
                {
                    *o = a * sc;
                }
            }
            // ---- per-layer input ----
            grow(&mut s.g3n.small2, n * hpl);
            gl.inp_gate
                .matmul(&self.pool, &s.xb[..n * d], n, &mut s.g3n.small2[..n * hpl]);
            for t in 0..n {
                let gs = &mut s.g3n;
                let e = &gs.ple[t * pl + l * hpl..t * pl + (l + 1) * hpl];
                for (v, &e) in gs.small2[t * hpl..(t + 1) * hpl].iter_mut().zip(e) {
                    *v = ops::gelu_tanh(*v) * e;
                }
            }
            gl.proj
                .matmul(&self.pool, &s.g3n.small2[..n * hpl], n, &mut s.out[..n * d]);
            for t in 0..n {
                let o = &mut s.out[t * d..(t + 1) * d];
                ops::rmsnorm_inplace(o, &gl.post_norm, eps);
                let alt = &mut s.g3n.alt[t * na * d..(t + 1) * na * d];
                for j in 1..na {
                    for (a, &p) in alt[j * d..(j + 1) * d].iter_mut().zip(o.iter()) {
                        *a += p;
                    }
                }
            }
        }

        // ---- streams back to one hidden state ----
        for (i, u) in g.unembd.iter().enumerate() {
            for t in 0..n {
                let src = &s.g3n.alt[t * na * d + (i + 1) * d..t * na * d + (i + 2) * d];
                s.xb[t * d..(t + 1) * d].copy_from_slice(src);
            }
            u.matmul(
                &self.pool,
                &s.xb[..n * d],
                n,
                &mut s.g3n.big[i * n * d..(i + 1) * n * d],
            );
        }
        for t in 0..n {
            let gs = &mut s.g3n;
            let alt = &gs.alt[t * na * d..(t + 1) * na * d];
            let target = rms(&alt[..d]);
            for i in 1..na {
                let u = &mut gs.big[(i - 1) * n * d + t * d..(i - 1) * n * d + (t + 1) * d];
                let mag = (ops::dot(u, u) / d as f32).max(1e-5).sqrt();
                u.iter_mut().for_each(|v| *v = *v * target / mag);
            }
            let x = &mut s.x[t * d..(t + 1) * d];
            for (k, xv) in x.iter_mut().enumerate() {
                let mut acc = alt[k];
                for i in 1..na {
                    acc += gs.big[(i - 1) * n * d + t * d + k];
                }
                *xv = acc / na as f32;
            }
        }
        Ok(())
    }

    /// `s.g3n.small[t][0..na] = tanh(router · (norm(x_t) / n_embd))` for the
    /// `n` rows of stream 0 (`activated` false) or of the activated output
    /// (`s.g3n.lau`, `activated` true).
    fn altup_modalities(
        &self,
        gl: &Layer<'a>,
        s: &mut Scratch,
        n: usize,
        na: usize,
        activated: bool,
    ) {
        let d = self.config.n_embd;
        let inv_d = (d as f64).recip() as f32;
        let gs = &mut s.g3n;
        grow(&mut gs.rin, n * d);
        grow(&mut gs.small, n * na);
        for t in 0..n {
            let x = if activated {
                &gs.lau[t * d..(t + 1) * d]
            } else {
                &gs.alt[t * na * d..t * na * d + d]
            };
            let o = &mut gs.rin[t * d..(t + 1) * d];
            ops::rmsnorm(o, x, &gl.router_norm, self.config.rms_eps);
            o.iter_mut().for_each(|v| *v *= inv_d);
        }
        gl.router
            .matmul(&self.pool, &gs.rin[..n * d], n, &mut gs.small[..n * na]);
        gs.small[..n * na].iter_mut().for_each(|v| *v = v.tanh());
    }
}
