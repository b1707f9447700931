//! AVX2 + F16C paths of the attention helpers: 8 lanes per vector, each
//! element computed with the scalar reference's operations in its order (a
//! rounded product, then a rounded add, terms in row order; the scale
//! last), so the results equal it bit for bit. f16 caches are widened by
//! `vcvtph2ps` (exact). Tails narrower than 8 lanes run the scalar
//! reference itself.
//!
//! Without these, CPUs without AVX-512 ran the scalar loops, whose f16
//! widening is a software conversion per element: long contexts were
//! attention-bound there.

use super::KvElem;
use std::arch::x86_64::*;

/// `out[o + t] = f(Σ_r c[r] · m[r · stride + o + t])` for `t < 8K`, the
/// sum in `r` order from 0, `f` a multiplication by `scale` when given.
///
/// # Safety
/// AVX and F16C; every `m[r · stride + o + t]` read and `out[o + t]`
/// written is in bounds.
#[inline(always)]
unsafe fn sum_rows_k<const K: usize, E: KvElem>(
    c: &[f32],
    m: *const E,
    stride: usize,
    o: usize,
    out: *mut f32,
    scale: Option<f32>,
) {
    // SAFETY: the caller guarantees the bounds.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); K];
        for (r, &cr) in c.iter().enumerate() {
            let cv = _mm256_set1_ps(cr);
            let p = m.add(r * stride + o);
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(cv, E::load8(p.add(8 * k))));
            }
        }
        for (k, a) in acc.iter().enumerate() {
            let v = match scale {
                Some(s) => _mm256_mul_ps(*a, _mm256_set1_ps(s)),
                None => *a,
            };
            _mm256_storeu_ps(out.add(o + 8 * k), v);
        }
    }
}

/// [`sum_rows_k`] over the whole 8-lane vectors of `out[..n]` (64 lanes per
/// pass, then 8); returns where they end (the tail is the caller's).
///
/// # Safety
/// AVX and F16C; `m[r · stride + t]` for `r < c.len()`, `t < n` and
/// `out[..n]` are in bounds.
#[inline(always)]
unsafe fn sum_rows<E: KvElem>(
    c: &[f32],
    m: *const E,
    stride: usize,
    out: *mut f32,
    n: usize,
    scale: Option<f32>,
) -> usize {
    // SAFETY: every access stays below n (the caller's bounds).
    unsafe {
        let mut o = 0;
        while o + 64 <= n {
            sum_rows_k::<8, E>(c, m, stride, o, out, scale);
            o += 64;
        }
        while o + 8 <= n {
            sum_rows_k::<1, E>(c, m, stride, o, out, scale);
            o += 8;
        }
        o
    }
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds of `super::check_scores` hold.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scores_transposed<E: KvElem>(
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    let n = sc.len();
    // SAFETY: kt[d·stride + start + j] for j < n is in bounds (checked by
    // the caller), as is sc[..n].
    let done = unsafe {
        let kt = kt.as_ptr().add(start);
        sum_rows(q, kt, stride, sc.as_mut_ptr(), n, Some(scale))
    };
    // The tail (< 8 positions): the reference, the same operations.
    super::scores_transposed_ref(q, scale, kt, stride, start + done, &mut sc[done..]);
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds of `super::check_rows` hold.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weighted_rows<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    let w = out.len();
    // SAFETY: v[j·stride + i] for i < w is in bounds (checked by the
    // caller), as is out[..w].
    let done = unsafe { sum_rows(a, v.as_ptr(), stride, out.as_mut_ptr(), w, None) };
    // The tail (< 8 lanes): the reference, the same operations.
    super::weighted_rows_ref(a, &v[done.min(v.len())..], stride, &mut out[done..]);
}
