//! Multi-head latent attention (DeepSeek-V2/V3), as llama.cpp runs the
//! files its converter writes: MQA over a compressed cache.
//!
//! Per position the cache keeps one key of `kv_lora_rank + n_rot` values —
//! the RMS-normed latent `c` (`attn_kv_a_mqa`'s first `kv_lora_rank`
//! outputs) and the rotated shared key `k_pe` — and no values: the value is
//! the latent itself, read from the key cache. transformers expands `c`
//! into per-head keys `k_nope_h = W_kb,h · c` and values `v_h = W_vb,h · c`;
//! here the expansion is absorbed into the queries and outputs instead
//! (the same sums in another order):
//! `q_h · k_h = (W_kb,hᵀ q_nope,h) · c + q_pe,h · k_pe` and
//! `Σ a·v_h = W_vb,h (Σ a·c)`. `attn_k_b` holds `W_kb,hᵀ` per head
//! (`kv_lora_rank × nope`), `attn_v_b` holds `W_vb,h` (`head_dim_v ×
//! kv_lora_rank`).

use super::load::{matrix, required_vec, tensor};
use super::{Layer, Model, Scratch, Sequence};
use crate::config::{Config, Mla};
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Proj};
use crate::ops;
use crate::weights::WeightSource;

/// One layer's MLA weights besides its first projection (in the layer's
/// `qkv`: `attn_q` or `attn_q_a`, then `attn_kv_a_mqa`) and `wo`.
#[derive(Debug)]
pub(super) struct MlaLayer<'a> {
    /// `[q_lora_rank]` norm of the compressed query and `attn_q_b`
    /// (`[n_head · head_dim_k] × q_lora_rank`); `None` when the queries come
    /// straight from `attn_q` (V2-Lite).
    q_b: Option<(Vec<f32>, Matrix<'a>)>,
    /// `[kv_lora_rank]` norm of the latent.
    kv_a_norm: Vec<f32>,
    /// Per head `kv_lora_rank × nope` (`attn_k_b`).
    k_b: Vec<Matrix<'a>>,
    /// Per head `head_dim_v × kv_lora_rank` (`attn_v_b`).
    v_b: Vec<Matrix<'a>>,
}

/// MLA's step buffers.
#[derive(Debug, Default)]
pub(super) struct MlaScratch {
    /// `[rows][first + kv_lora_rank + n_rot]` the first projection.
    proj: Vec<f32>,
    /// `[rows][n_head · head_dim_k]` queries before absorption.
    q: Vec<f32>,
    /// Gathered per-head inputs and outputs of `k_b` / `v_b`.
    a: Vec<f32>,
    b: Vec<f32>,
    /// `[rows][n_head · head_dim_v]` the heads' outputs.
    o: Vec<f32>,
}

/// `n` rows of `w` values from `src` (rows `ld` apart, from `off`) into `dst`.
fn gather(dst: &mut Vec<f32>, src: &[f32], n: usize, ld: usize, off: usize, w: usize) {
    dst.clear();
    for t in 0..n {
        dst.extend_from_slice(&src[t * ld + off..t * ld + off + w]);
    }
}

/// `n` rows of `w` values from `src` (packed) into `dst` (rows `ld` apart,
/// from `off`).
fn scatter(dst: &mut [f32], src: &[f32], n: usize, ld: usize, off: usize, w: usize) {
    for t in 0..n {
        dst[t * ld + off..t * ld + off + w].copy_from_slice(&src[t * w..(t + 1) * w]);
    }
}

impl<'a> MlaLayer<'a> {
    /// Layer `l`'s first projection (queries or their compression, then the
    /// latent and `k_pe`) and the rest of its MLA weights.
    pub(super) fn load(
        w: &'a dyn WeightSource,
        c: &Config,
        m: &Mla,
        l: usize,
    ) -> Result<(Proj<'a>, MlaLayer<'a>)> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let d = c.n_embd;
        let hq = c.n_head * m.head_dim_k;
        let (first, q_b) = match m.q_lora_rank {
            0 => (matrix(w, &n("attn_q.weight"), d, hq)?, None),
            r => (
                matrix(w, &n("attn_q_a.weight"), d, r)?,
                Some((
                    required_vec(w, &n("attn_q_a_norm.weight"), r, "norm")?,
                    matrix(w, &n("attn_q_b.weight"), r, hq)?,
                )),
            ),
        };
        let kv_a = matrix(w, &n("attn_kv_a_mqa.weight"), d, m.kv_lora_rank + c.n_rot)?;
        let per_head = |s: &str, cols: usize, rows: usize| -> Result<Vec<Matrix<'a>>> {
            let name = n(s);
            let whole = Matrix::bind(&name, tensor(w, &name)?, cols, Some(rows * c.n_head))?;
            let parts = whole.split_rows(c.n_head).ok_or_else(|| Error::Shape {
                name: name.clone(),
                expected: vec![cols as u64, rows as u64, c.n_head as u64],
                found: vec![cols as u64, (rows * c.n_head) as u64],
            })?;
            parts.into_iter().map(|p| p.into_native(&name)).collect()
        };
        let layer = MlaLayer {
            q_b,
            kv_a_norm: required_vec(w, &n("attn_kv_a_norm.weight"), m.kv_lora_rank, "norm")?,
            k_b: per_head("attn_k_b.weight", m.nope(c.n_rot), m.kv_lora_rank)?,
            v_b: per_head("attn_v_b.weight", m.kv_lora_rank, m.head_dim_v)?,
        };
        Ok((Proj::new(vec![first, kv_a]), layer))
    }
}

impl Model<'_> {
    /// Layer `l`'s attention for the `n` normed rows in `s.xb`, into
    /// `s.out` (before the residual): queries (through the low-rank
    /// projection and its norm, if any), the latent normed and `k_pe`
    /// rotated and cached, `q_nope` absorbed through `attn_k_b`, `q_pe`
    /// rotated, attention over the cache (scores over latent‖rope, values
    /// the latent), each head's result expanded through `attn_v_b`, then
    /// `attn_output`.
    pub(super) fn mla_attention(
        &self,
        layer: &Layer,
        m: &MlaLayer,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        l: usize,
        n: usize,
    ) {
        let c = &self.config;
        let Some(dims) = c.mla else {
            unreachable!("MLA layers exist only with MLA dims")
        };
        let (d, h, r, eps) = (c.n_embd, c.n_head, c.n_rot, c.rms_eps);
        let (lat, hk, hv) = (dims.kv_lora_rank, dims.head_dim_k, dims.head_dim_v);
        let nope = hk - r;
        let first = match dims.q_lora_rank {
            0 => h * hk,
            q => q,
        };
        let proj_w = first + lat + r;
        let ms = &mut s.mla;
        ms.proj.resize(n * proj_w, 0.0);
        layer.qkv.matmul(
            &self.pool,
            &s.xb[..n * d],
            n,
            &mut ms.proj[..n * proj_w],
            &mut s.tmp,
        );
        ms.q.resize(n * h * hk, 0.0);
        match &m.q_b {
            Some((norm, q_b)) => {
                gather(&mut ms.a, &ms.proj, n, proj_w, 0, first);
                for row in ms.a.chunks_exact_mut(first) {
                    ops::rmsnorm_inplace(row, norm, eps);
                }
                q_b.matmul(&self.pool, &ms.a[..n * first], n, &mut ms.q[..n * h * hk]);
            }
            None => gather(&mut ms.q, &ms.proj, n, proj_w, 0, first),
        }

        // Keys (latent ‖ k_pe) into the cache and the query rows'
        // rotated parts; the absorbed parts follow.
        let key_w = lat + r;
        let (qd, qkv_w) = (c.q_dim(), c.q_dim() + c.k_dim() + c.v_dim());
        let rope = &self.rope_global;
        for t in 0..n {
            let cs = &s.cs_global[t * r..(t + 1) * r];
            let row = &mut s.qkv[t * qkv_w..(t + 1) * qkv_w];
            let (qrow, rest) = row.split_at_mut(qd);
            let key = &mut rest[..key_w];
            let p = &ms.proj[t * proj_w + first..(t + 1) * proj_w];
            ops::rmsnorm(&mut key[..lat], &p[..lat], &m.kv_a_norm, eps);
            key[lat..].copy_from_slice(&p[lat..]);
            rope.apply(&mut key[lat..], r, cs);
            for (hh, qh) in ms.q[t * h * hk..(t + 1) * h * hk]
                .chunks_exact_mut(hk)
                .enumerate()
            {
                rope.apply(&mut qh[nope..], r, cs);
                qrow[hh * key_w + lat..(hh + 1) * key_w].copy_from_slice(&qh[nope..]);
            }
            seqs[s.row_seq[t]].put_keys(c, l, s.row_pos[t], key);
        }
        for (hh, k_b) in m.k_b.iter().enumerate() {
            gather(&mut ms.a, &ms.q, n, h * hk, hh * hk, nope);
            ms.b.resize(n * lat, 0.0);
            k_b.matmul(&self.pool, &ms.a[..n * nope], n, &mut ms.b[..n * lat]);
            scatter(&mut s.qkv, &ms.b, n, qkv_w, hh * key_w, lat);
        }

        self.attention(s, seqs, l, false, None, n);

        let ms = &mut s.mla;
        ms.o.resize(n * h * hv, 0.0);
        for (hh, v_b) in m.v_b.iter().enumerate() {
            gather(&mut ms.a, &s.att, n, h * lat, hh * lat, lat);
            ms.b.resize(n * hv, 0.0);
            v_b.matmul(&self.pool, &ms.a[..n * lat], n, &mut ms.b[..n * hv]);
            scatter(&mut ms.o, &ms.b, n, h * hv, hh * hv, hv);
        }
        layer
            .wo
            .matmul(&self.pool, &ms.o[..n * h * hv], n, &mut s.out[..n * d]);
    }
}
