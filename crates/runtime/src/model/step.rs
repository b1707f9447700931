//! One step of the graph: embedding, every block (attention, then the dense
//! or routed FFN), the head.

use super::attention::QkvPrep;
use super::{Ffn, Graph, Model, Scratch, Sequence};
use crate::config::Activation;
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Proj};
use crate::ops;
use gpack_quant::Pool;

impl Model<'_> {
    /// The step both entry points share; `s.head_rows` says which rows'
    /// logits to compute.
    pub(super) fn step<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
    ) -> Result<&'s [f32]> {
        self.step_with(s, seqs, tokens, None)
    }

    /// [`Model::step`], its first residual rows given (`[n][n_embd]`, an
    /// MTP block's projected input) instead of looked up from `tokens`.
    pub(super) fn step_with<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        embedded: Option<&[f32]>,
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
        match embedded {
            Some(rows) => s.x[..n * d].copy_from_slice(&rows[..n * d]),
            None => {
                for (t, &tok) in tokens.iter().flat_map(|t| t.iter()).enumerate() {
                    let x = &mut s.x[t * d..(t + 1) * d];
                    self.embd.row(tok as usize, x);
                    if let Some(scale) = c.embed_scale {
                        x.iter_mut().for_each(|v| *v *= scale);
                    }
                }
            }
        }
        // Rotary tables for this step's positions.
        for t in 0..n {
            let p = s.row_pos[t];
            self.rope_global
                .cos_sin(p, &mut s.cs_global[t * r..(t + 1) * r]);
            self.rope_swa.cos_sin(p, &mut s.cs_swa[t * r..(t + 1) * r]);
        }

        // The device's blocks first (all of them, or the first
        // `--gpu-layers`), then the CPU's; the head on the device when all
        // blocks are there.
        let (gpu_blocks, gpu_head) = match &self.gpu {
            Some(g) => (g.blocks(), self.gpu_blocks(g, s, seqs, tokens, n)?),
            None => (0, false),
        };
        if let Graph::Gemma3n(g) = &self.graph {
            self.gemma3n_layers(g, s, seqs, tokens, n)?;
        } else {
            for (l, layer) in self.layers.iter().enumerate().skip(gpu_blocks) {
                // ---- attention ----
                norm_rows(
                    &self.pool,
                    &mut s.xb,
                    &s.x,
                    d,
                    n,
                    layer.attn_norm.as_deref(),
                    c.rms_eps,
                );
                if let Some(m) = &layer.mla {
                    self.mla_attention(layer, m, s, seqs, l, n);
                } else {
                    layer.qkv.matmul(
                        &self.pool,
                        &s.xb[..n * d],
                        n,
                        &mut s.qkv[..n * qkv_w],
                        &mut s.tmp,
                    );
                    s.observer.show(&layer.inputs.attn, None, &s.xb[..n * d], d);
                    self.prepare_qkv(layer, s, seqs, l, n, QkvPrep::STANDARD);
                    self.attention(s, seqs, l, layer.swa, layer.sinks.as_deref(), n);
                    let att = &s.att[..n * att_w];
                    s.observer.show(&layer.inputs.attn_out, None, att, att_w);
                    layer.wo.matmul(&self.pool, att, n, &mut s.out[..n * d]);
                }
                if let Some(b) = &layer.wo_bias {
                    add_bias(&mut s.out[..n * d], b);
                }
                self.residual(s, n, layer.post_attn_norm.as_deref());

                // ---- feed-forward ----
                norm_rows(
                    &self.pool,
                    &mut s.xb,
                    &s.x,
                    d,
                    n,
                    layer.ffn_norm.as_deref(),
                    c.rms_eps,
                );
                match &layer.ffn {
                    Ffn::Dense { gate_up, down } => {
                        let out = &mut s.out[..n * d];
                        let bufs = (&mut s.gu, &mut s.hb, &mut s.tmp);
                        dense_ffn(
                            &self.pool,
                            c.activation,
                            gate_up,
                            down,
                            &s.xb[..n * d],
                            n,
                            bufs,
                            out,
                        );
                        // dense_ffn leaves its inputs in xb and hb.
                        let ff = down.cols();
                        s.observer.show(&layer.inputs.ffn, None, &s.xb[..n * d], d);
                        s.observer
                            .show(&layer.inputs.ffn_down, None, &s.hb[..n * ff], ff);
                    }
                    Ffn::Moe(m) => self.moe(s, l, m, &layer.inputs, n)?,
                }
                self.residual(s, n, layer.post_ffn_norm.as_deref());
            }
        }
        for (q, t) in seqs.iter_mut().zip(tokens) {
            q.pos += t.len();
        }
        if gpu_head {
            return Ok(&s.logits);
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
        self.output
            .matmul(&self.pool, &s.xb[..m * d], m, &mut s.logits);
        if let Some(div) = c.logit_scale {
            s.logits.iter_mut().for_each(|v| *v /= div);
        }
        if let Some(cap) = c.final_softcap {
            s.logits
                .iter_mut()
                .for_each(|v| *v = cap * (*v / cap).tanh());
        }
        Ok(&s.logits)
    }

    /// `x += norm(out)` for the `n` rows (the norm only where the block has
    /// one: gemma3's post-attention and post-FFN norms; granite's
    /// `residual_scale` multiplies `out` first), split by rows over the pool
    /// for prefill-sized steps ([`ops::add_rmsnorm`]).
    pub(super) fn residual(&self, s: &mut Scratch, n: usize, norm: Option<&[f32]>) {
        let (d, eps) = (self.config.n_embd, self.config.rms_eps);
        if let Some(r) = self.config.residual_scale {
            s.out[..n * d].iter_mut().for_each(|o| *o *= r);
        }
        let out = &s.out;
        ops::par_rows(&self.pool, &mut s.x, d, n, &|t0, xs| {
            for (i, x) in xs.chunks_exact_mut(d).enumerate() {
                let o = &out[(t0 + i) * d..(t0 + i + 1) * d];
                match norm {
                    Some(w) => ops::add_rmsnorm(x, o, w, eps),
                    None => x.iter_mut().zip(o).for_each(|(x, o)| *x += o),
                }
            }
        });
    }
}

/// `xb[t] = rmsnorm(x[t]) · w` for the `n` rows of `d` (split over the
/// pool for prefill-sized steps: each row's values are its own); a block
/// without the norm (`w` None: OLMo 2's post-norm blocks) reads `x` as is.
pub(super) fn norm_rows(
    pool: &Pool,
    xb: &mut [f32],
    x: &[f32],
    d: usize,
    n: usize,
    w: Option<&[f32]>,
    eps: f32,
) {
    let Some(w) = w else {
        xb[..n * d].copy_from_slice(&x[..n * d]);
        return;
    };
    ops::par_rows(pool, xb, d, n, &|t0, out| {
        for (i, o) in out.chunks_exact_mut(d).enumerate() {
            let t = t0 + i;
            ops::rmsnorm(o, &x[t * d..(t + 1) * d], w, eps);
        }
    });
}

/// The gated FFN `down · act(gate · x) ⊙ (up · x)` of the `n` rows of `x`
/// into `out` (`gate_up`: gate‖up, `2 · ff` rows; the activation split by
/// rows over the pool), with `(gu, hb, tmp)` as scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn dense_ffn(
    pool: &Pool,
    act: Activation,
    gate_up: &Proj,
    down: &Matrix,
    x: &[f32],
    n: usize,
    (gu, hb, tmp): (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<f32>),
    out: &mut [f32],
) {
    let ff = down.cols();
    gate_up.matmul(pool, x, n, &mut gu[..n * 2 * ff], tmp);
    let gu = &*gu;
    ops::par_rows(pool, hb, ff, n, &|t0, h| {
        for (i, h) in h.chunks_exact_mut(ff).enumerate() {
            let t = t0 + i;
            let (g, u) = gu[t * 2 * ff..(t + 1) * 2 * ff].split_at(ff);
            glu(act, g, u, h);
        }
    });
    down.matmul(pool, &hb[..n * ff], n, out);
}

/// `rows[t] += bias` for every row of `bias.len()` values.
pub(super) fn add_bias(rows: &mut [f32], bias: &[f32]) {
    for r in rows.chunks_exact_mut(bias.len()) {
        r.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// `h = act(g) · u` (SwiGLU, GeGLU or gpt-oss's clamped SwiGLU). SiLU is `g / (1 + expf(-g))` with
/// the exponentials of the whole row taken 16 at a time
/// (`gpack_quant::kernels::attn::exp_inplace`: glibc's expf bit for bit, so
/// on glibc it equals [`ops::silu`] element by element).
pub(super) fn glu(act: Activation, g: &[f32], u: &[f32], h: &mut [f32]) {
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
        Activation::SwigluOai => {
            let (alpha, limit) = crate::config::SWIGLU_OAI;
            h.iter_mut().zip(g.iter().zip(u)).for_each(|(h, (&g, &u))| {
                let g = g.min(limit);
                let u = u.clamp(-limit, limit);
                *h = (u + 1.0) * (g / (1.0 + (-alpha * g).exp()));
            })
        }
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
