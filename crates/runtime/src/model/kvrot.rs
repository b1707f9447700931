//! The Walsh–Hadamard rotation of heads a quantized KV cache stores.
//!
//! ggml's q8_0/q4_0 blocks share one scale per 32 values, so one large
//! dimension (keys have a few, from RoPE's slow frequencies and the
//! projections' outliers) costs every other value of its block most of
//! its bits. An orthonormal rotation spreads such a dimension over the
//! whole block before it is quantized and leaves the attention's sums
//! unchanged: with `H` orthonormal and symmetric (`H·H = I`), `(Hq)·(Hk)
//! = q·k`, and `Σ a_j (H v_j) = H (Σ a_j v_j)`, so the queries are
//! rotated as the keys are and the weighted values rotated back. The idea
//! is QuaRot's (Ashkboos et al., 2024); llama.cpp applies it to its
//! quantized caches with the block sizes used here. On SmolLM2's first
//! 512-token chunk of the GPL text it takes gpack's q4_0 cache's mean KL
//! against the f16 cache from 0.30 to 0.083 (llama.cpp's: 0.079 with its
//! rotation, 0.19 without) and q8_0's from 0.0047 to 0.0039
//! (crates/cli/tests/kv.rs, testdata/kv/).
//!
//! Policy (one place): keys are rotated when the key cache is quantized
//! and the head is a multiple of 64, in blocks of the largest power of two
//! ≥ 64 dividing the head; values when the value cache is quantized and
//! the head is a multiple of 64, in blocks of 64. f32/f16 caches are
//! never rotated (their rounding is not per block).

use super::kv::KvTypes;
use crate::config::Config;

/// The rotation blocks of a model's keys and values (0: not rotated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KvRot {
    /// Block of the key (and query) heads.
    pub k: usize,
    /// Block of the value heads (the attention's output heads rotated back).
    pub v: usize,
}

impl KvRot {
    /// The policy above for heads of `c` kept as `t`.
    pub(super) fn of(c: &Config, t: KvTypes) -> KvRot {
        let k = if t.k.quant().is_some() && c.head_dim > 0 && c.head_dim.is_multiple_of(64) {
            let mut b = 64;
            while c.head_dim.is_multiple_of(2 * b) {
                b *= 2;
            }
            b
        } else {
            0
        };
        let v = if t.v.quant().is_some() && c.head_dim_v > 0 && c.head_dim_v.is_multiple_of(64) {
            64
        } else {
            0
        };
        KvRot { k, v }
    }
}

/// Rotates `x` in place, block by block of `block` values (a power of two
/// dividing `x.len()`; 0: nothing): each block becomes `H·block` with `H`
/// the orthonormal Sylvester–Hadamard matrix (`H·H = I`).
pub(super) fn rotate(x: &mut [f32], block: usize) {
    if block == 0 {
        return;
    }
    debug_assert!(block.is_power_of_two() && x.len().is_multiple_of(block));
    let norm = 1.0 / (block as f32).sqrt();
    for b in x.chunks_exact_mut(block) {
        // The fast transform: log2(block) stages of butterflies.
        // (Pairs h apart, as slices: no bounds checks, vectorized.)
        let mut h = 1;
        while h < block {
            for pair in b.chunks_exact_mut(2 * h) {
                let (lo, hi) = pair.split_at_mut(h);
                for (a, c) in lo.iter_mut().zip(hi) {
                    (*a, *c) = (*a + *c, *a - *c);
                }
            }
            h *= 2;
        }
        b.iter_mut().for_each(|v| *v *= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::rotate;

    /// The dense Sylvester matrix times `x`, in f64.
    fn dense(x: &[f32]) -> Vec<f64> {
        let n = x.len();
        (0..n)
            .map(|i| {
                let s: f64 = (0..n)
                    .map(|j| {
                        let sign = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        sign * x[j] as f64
                    })
                    .sum();
                s / (n as f64).sqrt()
            })
            .collect()
    }

    /// The fast transform is the dense matrix's product; twice is the
    /// identity (to rounding); dot products are kept.
    #[test]
    fn rotation_is_the_orthonormal_hadamard_product() {
        for n in [64usize, 128, 256] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.3)
                .collect();
            let y: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.7).collect();
            let mut rx = x.clone();
            rotate(&mut rx, n);
            for (a, b) in rx.iter().zip(dense(&x)) {
                assert!((*a as f64 - b).abs() < 1e-5, "n {n}: {a} vs {b}");
            }
            let mut ry = y.clone();
            rotate(&mut ry, n);
            let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f32>();
            let scale = (dot(&x, &x) * dot(&y, &y)).sqrt();
            assert!(
                (dot(&rx, &ry) - dot(&x, &y)).abs() < 1e-5 * scale,
                "n {n}: dot"
            );
            let mut back = rx.clone();
            rotate(&mut back, n);
            for (a, b) in back.iter().zip(&x) {
                assert!((a - b).abs() < 1e-5, "n {n}: {a} vs {b}");
            }
        }
        // Blocks rotate apart: a 128-long row in blocks of 64.
        let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
        let mut r = x.clone();
        rotate(&mut r, 64);
        let (a, b) = (dense(&x[..64]), dense(&x[64..]));
        for (got, want) in r.iter().zip(a.iter().chain(&b)) {
            assert!((*got as f64 - want).abs() < 1e-3, "{got} vs {want}");
        }
    }
}
