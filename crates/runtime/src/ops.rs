//! Small f32 kernels of the graph: RMS norm, rotary embeddings, softmax,
//! activations and the dot/axpy loops of attention.
//!
//! Written in safe Rust so that LLVM vectorizes them: reductions use eight
//! independent accumulators (`chunks_exact(8)`), since a single f32
//! accumulator forces a serial add chain (floats are not reassociated).

use crate::config::RopeStyle;
use gpack_quant::kernels::attn::KvElem;
use gpack_quant::Pool;
use std::sync::Mutex;

/// Elements from which [`par_rows`] splits its rows over the pool (below,
/// waking the workers costs more than the work).
const PAR_ROWS_MIN: usize = 1 << 16;

/// `f(t0, rows)` over the first `n` rows of `out` (each `w` wide), in
/// chunks run on `pool` (the model's) when there is enough work: each
/// call gets a disjoint chunk of whole rows starting at row `t0` (one
/// `Mutex` per chunk, never contended). Every row's values are what `f`
/// gives it alone, whatever the split.
pub fn par_rows(
    pool: &Pool,
    out: &mut [f32],
    w: usize,
    n: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    let out = &mut out[..n * w];
    let per = if pool.threads() > 1 && n * w >= PAR_ROWS_MIN {
        n.div_ceil(pool.threads() * 4)
    } else {
        n
    };
    if per >= n || w == 0 {
        return f(0, out);
    }
    let chunks: Vec<Mutex<&mut [f32]>> = out.chunks_mut(per * w).map(Mutex::new).collect();
    pool.run(chunks.len(), &|c| {
        let mut rows = chunks[c].lock().unwrap_or_else(|e| e.into_inner());
        f(c * per, &mut rows);
    });
}

/// `Σ a[i] * b[i]` with eight partial sums (vectorizes to one 256-bit lane set).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// `y += a * x`.
#[inline]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yv, xv) in y.iter_mut().zip(x) {
        *yv += a * xv;
    }
}

/// `sc[j] = scale · Σ_d q[d] · kt[d · stride + start + j]` for `j < sc.len()`:
/// query-key scores against a transposed key cache (`kt` is `[hd][stride]`,
/// f32 or f16 bits: [`KvElem`]).
///
/// Runs `gpack_quant::kernels::attn::scores_transposed` (AVX-512 when
/// available, bit-identical to its scalar reference: same products and adds
/// in the same order per position).
///
/// Perf log (SmolLM2-135M, 256-token prefill, 1 thread): one dot product per
/// key (8 partial sums + horizontal reduction) 15 % of the prefill; one axpy
/// per head dim over all positions: no better (the scores are loaded and
/// stored hd times); blocks of 16 positions accumulated in registers over
/// all of hd (safe Rust, SSE2): 10 %; the same on AVX-512 in the quant crate
/// (64–128 positions per pass): see docs/perf-history/runtime.md.
pub fn scores_transposed<E: KvElem>(
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    gpack_quant::kernels::attn::scores_transposed(q, scale, kt, stride, start, sc)
}

/// `out = Σ_j a[j] · v[j · stride .. j · stride + out.len()]`: the attention-
/// weighted sum of value rows (f32 or f16 bits; output dims in registers over all rows;
/// `gpack_quant::kernels::attn::weighted_rows`, AVX-512 when available,
/// bit-identical to its scalar reference).
pub fn weighted_rows<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    gpack_quant::kernels::attn::weighted_rows(a, v, stride, out)
}

/// [`scores_transposed`] for the query heads that share a KV head: query `i`
/// is `q[i·d .. (i+1)·d]`, its `n` scores go to `sc[i·ld ..]`, each the bits
/// it gets alone; the keys are read once for up to 4 heads
/// (`gpack_quant::kernels::attn::scores_transposed_group`).
#[allow(clippy::too_many_arguments)]
pub fn scores_transposed_group<E: KvElem>(
    q: &[f32],
    d: usize,
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) {
    gpack_quant::kernels::attn::scores_transposed_group(q, d, scale, kt, stride, start, n, sc, ld)
}

/// [`weighted_rows`] for the query heads that share a KV head: probability
/// row `i` is `a[i·lda ..][..len]`, its `w` outputs `out[i·w .. (i+1)·w]`,
/// each the bits it gets alone (`gpack_quant::kernels::attn::weighted_rows_group`).
pub fn weighted_rows_group<E: KvElem>(
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[E],
    stride: usize,
    out: &mut [f32],
    w: usize,
) {
    gpack_quant::kernels::attn::weighted_rows_group(a, lda, len, v, stride, out, w)
}

/// Weighted sums over transposed rows (MLA's values, read from the key
/// cache's `[dim][stride]` blocks): for each probability row `i`
/// (`a[i·lda ..][..n]`) and each of the first `w` dims `j`,
/// `out[i·w + j] += Σ_p a[i·lda + p] · kt[j·stride + start + p]`.
#[allow(clippy::too_many_arguments)]
pub fn weighted_transposed_group<E: KvElem>(
    a: &[f32],
    lda: usize,
    kt: &[E],
    stride: usize,
    start: usize,
    n: usize,
    out: &mut [f32],
    w: usize,
) {
    assert!(
        start + n <= stride && w * stride <= kt.len(),
        "key block too short"
    );
    let mut row = [0f32; 256];
    for (j, kr) in kt.chunks_exact(stride).take(w).enumerate() {
        // One transposed row widened once for every probability row.
        let kr = &kr[start..start + n];
        for chunk in (0..n).step_by(row.len()) {
            let m = (n - chunk).min(row.len());
            for (r, &k) in row[..m].iter_mut().zip(&kr[chunk..chunk + m]) {
                *r = k.widen();
            }
            for (i, o) in out.chunks_exact_mut(w).enumerate() {
                let ai = &a[i * lda + chunk..i * lda + chunk + m];
                o[j] += dot(ai, &row[..m]);
            }
        }
    }
}

/// `out = x / sqrt(mean(x²) + eps) * w` (llama.cpp `ggml_rms_norm` then
/// `ggml_mul`; HF `LlamaRMSNorm`). The sum of squares is accumulated in f32
/// with eight partial sums.
#[inline]
pub fn rmsnorm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let inv = rms_inv(x, eps);
    for ((o, &xv), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = xv * inv * wv;
    }
}

/// `1 / sqrt(mean(x²) + eps)`: the factor of an RMS norm (alone, gemma3n's
/// weightless v norm).
#[inline]
pub fn rms_inv(x: &[f32], eps: f32) -> f32 {
    1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt()
}

/// In-place [`rmsnorm`].
#[inline]
pub fn rmsnorm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let inv = rms_inv(x, eps);
    for (xv, &wv) in x.iter_mut().zip(w) {
        *xv = *xv * inv * wv;
    }
}

/// `x += rmsnorm(o) · w` without writing `o`: each element is what
/// [`rmsnorm_inplace`] of `o` and then the add give it.
pub fn add_rmsnorm(x: &mut [f32], o: &[f32], w: &[f32], eps: f32) {
    let inv = rms_inv(o, eps);
    for ((xv, &ov), &wv) in x.iter_mut().zip(o).zip(w) {
        *xv += ov * inv * wv;
    }
}

/// In-place softmax: `exp(x - max)` (glibc's `expf`, bit for bit, as
/// `gpack_quant::kernels::attn::expf`), summed in index order, scaled by
/// `1 / sum`; the exponentials run 16 at a time on AVX-512
/// (`gpack_quant::kernels::attn::softmax`, bit-identical to its scalar
/// reference). Perf log: libm `expf` calls and the sum kept on the stack
/// around them were ~13 % of a 512-token SmolLM2 prefill.
pub fn softmax(x: &mut [f32]) {
    gpack_quant::kernels::attn::softmax(x)
}

/// [`softmax`] of `rows` rows `x[r·ld ..][..len]` (the query heads that
/// share a KV head), each with [`softmax`]'s bits, their sums side by side
/// (`gpack_quant::kernels::attn::softmax_rows`).
pub fn softmax_rows(x: &mut [f32], ld: usize, len: usize, rows: usize) {
    gpack_quant::kernels::attn::softmax_rows(x, ld, len, rows)
}

/// SiLU, `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (`gelu_pytorch_tanh`, ggml `ggml_gelu`).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

/// Rotary tables for one base: the inverse frequencies `base^(-2i/n_rot)`.
#[derive(Clone, Debug)]
pub struct Rope {
    /// `[n_rot / 2]` inverse frequencies.
    inv_freq: Vec<f32>,
    /// Position multiplier (1 / linear scaling factor).
    freq_scale: f32,
    style: RopeStyle,
    n_rot: usize,
    /// Multiplier of cos and sin (LongRoPE's attention factor; 1 otherwise).
    mscale: f64,
}

impl Rope {
    /// Tables for `n_rot` rotated dims of base `base`. Frequencies are computed
    /// in f64 and rounded once (HF computes them in f32, ggml by repeated f32
    /// multiplication; both are within a few ulps of this).
    pub fn new(
        n_rot: usize,
        base: f32,
        freq_scale: f32,
        style: RopeStyle,
        freq_factors: Option<&[f32]>,
    ) -> Rope {
        let inv_freq = (0..n_rot / 2)
            .map(|i| {
                let f = (base as f64).powf(-2.0 * i as f64 / n_rot as f64);
                let ff = freq_factors.and_then(|v| v.get(i)).copied().unwrap_or(1.0) as f64;
                (f / ff) as f32
            })
            .collect();
        Rope {
            inv_freq,
            freq_scale,
            style,
            n_rot,
            mscale: 1.0,
        }
    }

    /// YaRN tables (transformers' `_compute_yarn_parameters`): per pair
    /// `i`, the inverse frequency blends `base^(-2i/n_rot) / factor`
    /// (interpolated) into `base^(-2i/n_rot)` (kept) by
    /// `1 - clamp((i - low) / (high - low), 0, 1)`, where `low`/`high` are
    /// the pairs that turn `beta_fast` / `beta_slow` times over the original
    /// context (floored/ceiled unless `exact_range`); cos and sin are
    /// multiplied by the attention factor.
    pub fn yarn(n_rot: usize, base: f32, style: RopeStyle, y: &crate::config::Yarn) -> Rope {
        let (dim, base) = (n_rot as f64, base as f64);
        let corr = |rot: f32| {
            dim * (y.n_ctx_orig as f64 / (rot as f64 * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let (mut low, mut high) = (corr(y.beta_fast), corr(y.beta_slow));
        if !y.exact_range {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
        if low == high {
            high += 0.001;
        }
        let factor = y.factor as f64;
        let inv_freq = (0..n_rot / 2)
            .map(|i| {
                let extrap = base.powf(-2.0 * i as f64 / dim);
                let interp = extrap / factor;
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                (interp * (1.0 - keep) + extrap * keep) as f32
            })
            .collect();
        Rope {
            inv_freq,
            freq_scale: 1.0,
            style,
            n_rot,
            mscale: y.attn_factor as f64,
        }
    }

    /// The same rotation with cos and sin multiplied by `m` (LongRoPE's
    /// attention factor: llama.cpp's `attn_factor`, transformers'
    /// `attention_scaling`).
    pub fn with_mscale(mut self, m: f32) -> Rope {
        self.mscale = m as f64;
        self
    }

    /// Fills `cs` (`[n_rot/2][2]`: cos, sin) for position `pos`.
    pub fn cos_sin(&self, pos: usize, cs: &mut [f32]) {
        let p = pos as f64 * self.freq_scale as f64;
        for (c, &f) in cs.chunks_exact_mut(2).zip(&self.inv_freq) {
            let (s, co) = (p * f as f64).sin_cos();
            c[0] = (co * self.mscale) as f32;
            c[1] = (s * self.mscale) as f32;
        }
    }

    /// Rotates each head (`head_dim` wide) of `x` in place with the table `cs`
    /// from [`Rope::cos_sin`]. Dims past `n_rot` are left unchanged.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, cs: &[f32]) {
        let half = self.n_rot / 2;
        for h in x.chunks_exact_mut(head_dim) {
            match self.style {
                RopeStyle::Normal => {
                    for (p, c) in h[..self.n_rot].chunks_exact_mut(2).zip(cs.chunks_exact(2)) {
                        let (x0, x1) = (p[0], p[1]);
                        p[0] = x0 * c[0] - x1 * c[1];
                        p[1] = x0 * c[1] + x1 * c[0];
                    }
                }
                RopeStyle::Neox => {
                    let (a, b) = h[..self.n_rot].split_at_mut(half);
                    for ((x0, x1), c) in a.iter_mut().zip(b.iter_mut()).zip(cs.chunks_exact(2)) {
                        let (v0, v1) = (*x0, *x1);
                        *x0 = v0 * c[0] - v1 * c[1];
                        *x1 = v0 * c[1] + v1 * c[0];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transposed weighted sums equal the naive double loop, for f32
    /// and f16 keys, partial blocks and more positions than one chunk.
    #[test]
    fn weighted_transposed_group_matches_naive() {
        let (stride, w, rows) = (300usize, 7usize, 3usize);
        let kt: Vec<f32> = (0..stride * (w + 2))
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let kt16: Vec<u16> = kt
            .iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect();
        let lda = 290;
        let a: Vec<f32> = (0..rows * lda).map(|i| (i % 13) as f32 / 13.0).collect();
        for (start, n) in [(0, 1), (5, 17), (0, 280), (3, 290)] {
            let mut want = vec![0.5f32; rows * w];
            let mut want16 = want.clone();
            for i in 0..rows {
                for j in 0..w {
                    for p in 0..n {
                        want[i * w + j] += a[i * lda + p] * kt[j * stride + start + p];
                        let k16 = half::f16::from_bits(kt16[j * stride + start + p]).to_f32();
                        want16[i * w + j] += a[i * lda + p] * k16;
                    }
                }
            }
            let mut got = vec![0.5f32; rows * w];
            weighted_transposed_group(&a, lda, &kt, stride, start, n, &mut got, w);
            let mut got16 = vec![0.5f32; rows * w];
            weighted_transposed_group(&a, lda, &kt16, stride, start, n, &mut got16, w);
            for (g, e) in got.iter().zip(&want).chain(got16.iter().zip(&want16)) {
                assert!(
                    (g - e).abs() <= 1e-4 * e.abs().max(1.0),
                    "{start} {n}: {g} vs {e}"
                );
            }
        }
    }

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.25).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }

    #[test]
    fn neox_and_normal_agree_after_permutation() {
        // NORM on interleaved pairs == NEOX on the halves of the permuted head.
        let hd = 8;
        let x: Vec<f32> = (0..hd).map(|i| i as f32 + 1.0).collect();
        let norm = Rope::new(hd, 10000.0, 1.0, RopeStyle::Normal, None);
        let neox = Rope::new(hd, 10000.0, 1.0, RopeStyle::Neox, None);
        let mut cs = vec![0f32; hd];
        norm.cos_sin(5, &mut cs);
        let mut a = x.clone();
        norm.apply(&mut a, hd, &cs);
        // interleaved [x0 y0 x1 y1 ...] -> halves [x0 x1 .. y0 y1 ..]
        let mut b: Vec<f32> = (0..hd / 2)
            .map(|i| x[2 * i])
            .chain((0..hd / 2).map(|i| x[2 * i + 1]))
            .collect();
        neox.apply(&mut b, hd, &cs);
        for i in 0..hd / 2 {
            assert!((a[2 * i] - b[i]).abs() < 1e-6);
            assert!((a[2 * i + 1] - b[i + hd / 2]).abs() < 1e-6);
        }
    }

    #[test]
    fn blocked_attention_helpers_match_naive() {
        let (hd, stride, start, len) = (20, 50, 3, 37);
        let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.37).sin()).collect();
        let kt: Vec<f32> = (0..len.max(hd) * stride)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let mut sc = vec![0f32; len];
        scores_transposed(&q, 0.5, &kt, stride, start, &mut sc);
        for (j, s) in sc.iter().enumerate() {
            let naive: f32 = (0..hd)
                .map(|d| q[d] * kt[d * stride + start + j])
                .sum::<f32>()
                * 0.5;
            assert!((s - naive).abs() < 1e-4, "{j}: {s} vs {naive}");
        }
        let mut out = vec![0f32; hd];
        weighted_rows(&sc, &kt, stride, &mut out);
        for (d, o) in out.iter().enumerate() {
            let naive: f32 = (0..len).map(|j| sc[j] * kt[j * stride + d]).sum();
            assert!((o - naive).abs() < 1e-3, "{d}: {o} vs {naive}");
        }
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut v = vec![1.0, 2.0, 3.0, -1.0];
        softmax(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(v[2] > v[1] && v[1] > v[0] && v[0] > v[3]);
    }
}
