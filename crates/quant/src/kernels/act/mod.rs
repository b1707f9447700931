//! Activation quantization: int8 codes per block of 32 with an f16-rounded
//! scale (ggml's `q8_0`/`q8_K` scheme), shared by every integer kernel
//! family ([`QuantizedActivations`]).

use super::{Isa, SendPtr, QA};
use crate::pool::Pool;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Activations quantized to int8 per block of 32, `n` vectors of `cols`.
///
/// Per block: `d` (f32 scale) and the eight lane sums `S[j] = Σ_k q[4j+k]`
/// used by the asymmetric and offset corrections (see the module docs).
/// With a span of `s` blocks ([`QuantizedActivations::quantize_span`]),
/// each run of `s` blocks shares one scale, taken from the largest `|x|` of
/// the whole run (every block of the run stores it): the 256-element
/// activation blocks of the K-quant kernels (`kernels::rows16`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizedActivations {
    n: usize,
    cols: usize,
    /// `[n][cols]` codes in -127..=127.
    q: Vec<i8>,
    /// `[n][cols / 32]` scales.
    d: Vec<f32>,
    /// `[n][cols / 32][8]` lane sums.
    ls: Vec<i32>,
}

/// One quantized activation vector, borrowed.
#[derive(Clone, Copy)]
pub(crate) struct ActRef<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub ls: &'a [i32],
}

/// C `roundf` (half away from zero) for |v| < 2^23, written so it vectorizes.
#[inline(always)]
fn round_half_away(v: f32) -> i32 {
    let t = v as i32; // truncation toward zero, exact for |v| < 2^31
    let f = v - t as f32; // exact
                          // Wrapping: a block of subnormals overflows `1/d` to infinity, `v as i32`
                          // saturates and the +1 wraps (then clamps to -127) in release builds;
                          // debug builds now compute the same instead of panicking.
    t.wrapping_add((f >= 0.5) as i32)
        .wrapping_sub((f <= -0.5) as i32)
}

/// Quantizes whole blocks: `x` (a multiple of `32 · span` values) into `q`,
/// `d` and `ls` (one scale and 8 lane sums per block; each run of `span`
/// blocks shares the scale of its largest `|x|`), on the kernels' ISA
/// (bit-identical to [`quantize_blocks_scalar`]; tested).
fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], ls: &mut [i32], span: usize) {
    quantize_blocks_on(Isa::best(), x, q, d, ls, span)
}

/// [`quantize_blocks`] on `isa`'s quantizer (`isa` must be available).
fn quantize_blocks_on(
    isa: Isa,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    ls: &mut [i32],
    span: usize,
) {
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    assert!(
        span > 0 && x.len().is_multiple_of(QA * span),
        "whole spans of blocks"
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: available (asserted).
        Isa::Avx512Vnni => unsafe { avx512::quantize_blocks(x, q, d, ls, span) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: available (asserted): AVX2, FMA and F16C.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::quantize_blocks(x, q, d, ls, span) },
        _ => quantize_blocks_scalar(x, q, d, ls, span),
    }
}

/// [`quantize_blocks`] block by block with [`quantize_block_amax`].
fn quantize_blocks_scalar(x: &[f32], q: &mut [i8], d: &mut [f32], ls: &mut [i32], span: usize) {
    let mut amax = 0f32;
    for (k, ((xb, qb), (d, ls))) in x
        .chunks_exact(QA)
        .zip(q.chunks_exact_mut(QA))
        .zip(d.iter_mut().zip(ls.chunks_exact_mut(8)))
        .enumerate()
    {
        if k % span == 0 {
            amax = abs_max(&x[k * QA..(k + span) * QA]);
        }
        quantize_block_amax(xb, qb, d, ls, amax);
    }
}

/// The largest `|v|` of `x`, NaNs ignored (0 for none).
#[inline(always)]
pub(crate) fn abs_max(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, v| a.max(v.abs()))
}

/// Quantizes one block of 32 with the scale of `amax` (the scheme of the
/// module docs; `amax` is [`abs_max`] of the block or of its span).
#[inline(always)]
pub(crate) fn quantize_block_amax(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut f32,
    ls: &mut [i32],
    amax: f32,
) {
    let db = amax / 127.0;
    let id = if db != 0.0 { 1.0 / db } else { 0.0 };
    for (q, &v) in qb.iter_mut().zip(xb) {
        // Clamped before rounding (the same codes for every finite product):
        // a block of only subnormals has an infinite `id`, and ±inf must
        // give ±127, not a wrapped integer.
        *q = round_half_away((v * id).clamp(-127.0, 127.0)) as i8;
    }
    // ggml stores the activation scale as f16 (block_q8_0/q8_1 `d`).
    *d = half::f16::from_f32(db).to_f32();
    for (j, s) in ls.iter_mut().enumerate() {
        *s = qb[4 * j..4 * j + 4].iter().map(|&v| i32::from(v)).sum();
    }
}

impl QuantizedActivations {
    /// An empty buffer (reused across calls by [`QuantizedActivations::quantize`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantizes `n` vectors of `cols` f32 (`x.len() == n * cols`,
    /// `cols % 32 == 0`), reusing this buffer's allocations.
    ///
    /// # Panics
    /// If the shapes do not match.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        self.quantize_span(x, n, cols, 1);
    }

    /// [`QuantizedActivations::quantize`] with each run of `span` blocks
    /// sharing one scale (`cols % (32 · span) == 0`).
    ///
    /// # Panics
    /// If the shapes do not match.
    pub fn quantize_span(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks(x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    /// [`QuantizedActivations::quantize_span`] on `isa`'s quantizer, whatever
    /// the dispatcher would pick (each SIMD path is tested against the scalar).
    ///
    /// # Panics
    /// As `quantize_span`, and if `isa` is not available on this CPU.
    #[doc(hidden)]
    pub fn quantize_isa(&mut self, isa: Isa, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks_on(isa, x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    /// [`QuantizedActivations::quantize_span`] on the scalar path whatever the
    /// ISA: the reference the SIMD quantizer is tested against.
    #[doc(hidden)]
    pub fn quantize_ref(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks_scalar(x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    fn resize(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        assert_eq!(x.len(), n * cols, "activation length must be n * cols");
        assert!(
            span > 0 && cols.is_multiple_of(QA * span),
            "activation cols must be a multiple of 32 × span ({span})"
        );
        let nb = cols / QA;
        self.n = n;
        self.cols = cols;
        self.q.resize(n * cols, 0);
        self.d.resize(n * nb, 0.0);
        self.ls.resize(n * nb * 8, 0);
    }

    /// [`QuantizedActivations::quantize`] with the vectors split over `pool`
    /// (the same values: each vector is quantized independently), then
    /// `after(i, vector i)` on the thread that quantized vector `i`.
    pub(crate) fn quantize_on(
        &mut self,
        pool: &Pool,
        x: &[f32],
        n: usize,
        cols: usize,
        after: &(dyn Fn(usize, ActRef) + Sync),
    ) {
        self.resize(x, n, cols, 1);
        let nb = cols / QA;
        // Below ~16K elements the pool's wake-up costs more than it saves.
        let per_task = if pool.threads() > 1 && n * cols >= 16 * 1024 {
            n.div_ceil(pool.threads() * 4).max(1)
        } else {
            n
        };
        let tasks = n.div_ceil(per_task);
        let (qp, dp, lp) = (
            SendPtr(self.q.as_mut_ptr()),
            SendPtr(self.d.as_mut_ptr()),
            SendPtr(self.ls.as_mut_ptr()),
        );
        let task = |t: usize| {
            let (v0, v1) = (t * per_task, ((t + 1) * per_task).min(n));
            // SAFETY: vectors v0..v1 of distinct tasks are disjoint ranges of
            // q ([n][cols]), d ([n][nb]) and ls ([n][nb][8]), all resized above
            // and alive until `pool.run` returns (it waits for every task).
            let (q, d, ls) = unsafe {
                (
                    std::slice::from_raw_parts_mut(qp.at(v0 * cols), (v1 - v0) * cols),
                    std::slice::from_raw_parts_mut(dp.at(v0 * nb), (v1 - v0) * nb),
                    std::slice::from_raw_parts_mut(lp.at(v0 * nb * 8), (v1 - v0) * nb * 8),
                )
            };
            quantize_blocks(&x[v0 * cols..v1 * cols], q, d, ls, 1);
            for v in v0..v1 {
                let off = v - v0;
                after(
                    v,
                    ActRef {
                        q: &q[off * cols..(off + 1) * cols],
                        d: &d[off * nb..(off + 1) * nb],
                        ls: &ls[off * nb * 8..(off + 1) * nb * 8],
                    },
                );
            }
        };
        if tasks == 1 {
            task(0);
        } else {
            pool.run(tasks, &task);
        }
    }

    /// Number of vectors.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Elements per vector.
    pub fn cols(&self) -> usize {
        self.cols
    }

    pub(crate) fn get(&self, i: usize) -> ActRef<'_> {
        let nb = self.cols / QA;
        ActRef {
            q: &self.q[i * self.cols..(i + 1) * self.cols],
            d: &self.d[i * nb..(i + 1) * nb],
            ls: &self.ls[i * nb * 8..(i + 1) * nb * 8],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_half_away_is_roundf() {
        let mut v = -130.0f32;
        while v <= 130.0 {
            for x in [
                v,
                v + 0.5,
                v - 0.5,
                f32::from_bits(v.to_bits() + 1),
                f32::from_bits(v.to_bits().max(1) - 1),
            ] {
                if x.abs() < 200.0 {
                    assert_eq!(round_half_away(x), x.round() as i32, "{x}");
                }
            }
            v += 0.0625;
        }
        assert_eq!(round_half_away(0.49999997), 0);
        assert_eq!(round_half_away(-0.5), -1);
        assert_eq!(round_half_away(2.5), 3);
    }

    #[test]
    fn activation_lane_sums() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) * 0.1).collect();
        let mut a = QuantizedActivations::new();
        a.quantize(&x, 1, 64);
        let r = a.get(0);
        for b in 0..2 {
            for j in 0..8 {
                let s: i32 = r.q[b * 32 + 4 * j..b * 32 + 4 * j + 4]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum();
                assert_eq!(r.ls[b * 8 + j], s);
            }
            assert!(r.q[b * 32..b * 32 + 32].iter().any(|&v| v.abs() == 127));
        }
    }
}

#[cfg(test)]
mod subnormal_tests {
    use super::*;

    /// A block of only subnormal activations (1/d overflows to infinity)
    /// keeps each value's sign: +127, -127 or 0, on the dispatched path too.
    #[test]
    fn subnormal_blocks_keep_their_signs() {
        // 2^-127: its /127 is a non-zero subnormal whose inverse overflows.
        let tiny = f32::from_bits(0x0040_0000);
        let x: Vec<f32> = (0..64)
            .map(|i| match i % 3 {
                _ if i >= 32 => i as f32 - 48.0,
                0 => tiny,
                1 => -tiny,
                _ => 0.0,
            })
            .collect();
        let want: Vec<i8> = (0..32)
            .map(|i| match i % 3 {
                0 => 127,
                1 => -127,
                _ => 0,
            })
            .collect();
        let (mut q, mut d, mut ls) = (vec![0i8; 64], vec![0f32; 2], vec![0i32; 16]);
        quantize_blocks_scalar(&x, &mut q, &mut d, &mut ls, 1);
        assert_eq!(&q[..32], &want[..]);
        for isa in Isa::available() {
            let (mut q2, mut d2, mut ls2) = (vec![0i8; 64], vec![0f32; 2], vec![0i32; 16]);
            quantize_blocks_on(isa, &x, &mut q2, &mut d2, &mut ls2, 1);
            assert_eq!((&q2, &d2, &ls2), (&q, &d, &ls), "{isa:?}");
        }
    }
}
