//! AVX2 + FMA + F16C paths of the attention helpers: 8 lanes per vector,
//! each element computed with the scalar reference's operations in its
//! order (one fused multiply-add per term, terms in row order; the scale
//! last), so the results equal it bit for bit. f16 caches are widened by
//! `vcvtph2ps` (exact). Tails narrower than 8 lanes run the scalar
//! reference itself.
//!
//! Without these, CPUs without AVX-512 ran the scalar loops, whose f16
//! widening is a software conversion per element: long contexts were
//! attention-bound there.

use super::KvElem;
use std::arch::x86_64::*;

/// `out[i · os + o + t] = f(Σ_r c[i · cs + r] · m[r · stride + o + t])`
/// for the `M` coefficient rows `i`, `r < len` and `t < 8K`, each sum in `r`
/// order from 0, `f` a multiplication by `scale` when given; each row of `m`
/// is loaded (and widened) once for the `M` rows (the query heads that
/// share a KV head).
///
/// # Safety
/// AVX, FMA and F16C; every `c[i · cs + r]`, `m[r · stride + o + t]` read and
/// `out[i · os + o + t]` written is in bounds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sum_rows_k<const M: usize, const K: usize, E: KvElem>(
    c: *const f32,
    cs: usize,
    len: usize,
    m: *const E,
    stride: usize,
    o: usize,
    out: *mut f32,
    os: usize,
    scale: Option<f32>,
) {
    // SAFETY: the caller guarantees the bounds.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); K]; M];
        for r in 0..len {
            let p = m.add(r * stride + o);
            let mut row = [_mm256_setzero_ps(); K];
            for (k, x) in row.iter_mut().enumerate() {
                *x = E::load8(p.add(8 * k));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let cv = _mm256_set1_ps(*c.add(i * cs + r));
                for (a, x) in acc.iter_mut().zip(&row) {
                    *a = _mm256_fmadd_ps(cv, *x, *a);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (k, a) in acc.iter().enumerate() {
                let v = match scale {
                    Some(s) => _mm256_mul_ps(*a, _mm256_set1_ps(s)),
                    None => *a,
                };
                _mm256_storeu_ps(out.add(i * os + o + 8 * k), v);
            }
        }
    }
}

/// [`sum_rows_k`] over the whole 8-lane vectors of `out[i · os ..][..n]`
/// (64 lanes per pass for one row, 16 for several, then 8); returns where
/// they end (the tail is the caller's).
///
/// # Safety
/// AVX and F16C; `c[i · cs + r]`, `m[r · stride + t]` for `i < M`, `r <
/// len`, `t < n` and `out[i · os ..][..n]` are in bounds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sum_rows<const M: usize, E: KvElem>(
    c: *const f32,
    cs: usize,
    len: usize,
    m: *const E,
    stride: usize,
    out: *mut f32,
    os: usize,
    n: usize,
    scale: Option<f32>,
) -> usize {
    // SAFETY: every access stays below n (the caller's bounds).
    unsafe {
        let mut o = 0;
        while M == 1 && o + 64 <= n {
            sum_rows_k::<M, 8, E>(c, cs, len, m, stride, o, out, os, scale);
            o += 64;
        }
        while M > 1 && o + 16 <= n {
            sum_rows_k::<M, 2, E>(c, cs, len, m, stride, o, out, os, scale);
            o += 16;
        }
        while o + 8 <= n {
            sum_rows_k::<M, 1, E>(c, cs, len, m, stride, o, out, os, scale);
            o += 8;
        }
        o
    }
}

/// [`sum_rows`] for `rows` coefficient rows, up to 4 at a time; returns
/// where the whole vectors end.
///
/// # Safety
/// As [`sum_rows`] for `i < rows`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sum_rows_group<E: KvElem>(
    rows: usize,
    c: *const f32,
    cs: usize,
    len: usize,
    m: *const E,
    stride: usize,
    out: *mut f32,
    os: usize,
    n: usize,
    scale: Option<f32>,
) -> usize {
    let mut done = n / 8 * 8;
    // SAFETY: each call covers rows i0 .. i0 + k <= rows.
    unsafe {
        let mut i0 = 0;
        while i0 < rows {
            let (c, out) = (c.add(i0 * cs), out.add(i0 * os));
            macro_rules! go {
                ($m:literal) => {
                    sum_rows::<$m, E>(c, cs, len, m, stride, out, os, n, scale)
                };
            }
            let k = (rows - i0).min(4);
            done = match k {
                1 => go!(1),
                2 => go!(2),
                3 => go!(3),
                _ => go!(4),
            };
            i0 += k;
        }
    }
    done
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
        let (ktp, out) = (kt.as_ptr().add(start), sc.as_mut_ptr());
        sum_rows::<1, E>(q.as_ptr(), 0, q.len(), ktp, stride, out, 0, n, Some(scale))
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
    let done = unsafe {
        let (c, len, o) = (a.as_ptr(), a.len(), out.as_mut_ptr());
        sum_rows::<1, E>(c, 0, len, v.as_ptr(), stride, o, 0, w, None)
    };
    // The tail (< 8 lanes): the reference, the same operations.
    super::weighted_rows_ref(a, &v[done.min(v.len())..], stride, &mut out[done..]);
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds of `super::check_group` hold.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_group<E: KvElem>(
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
    let rows = q.len() / d;
    // SAFETY: q[i·d + r], kt[r·stride + start + j] and sc[i·ld + j] for
    // i < rows, r < d, j < n are in bounds (checked by the caller).
    let done = unsafe {
        let (ktp, out) = (kt.as_ptr().add(start), sc.as_mut_ptr());
        sum_rows_group(rows, q.as_ptr(), d, d, ktp, stride, out, ld, n, Some(scale))
    };
    // The tails (< 8 positions): the reference, the same operations.
    if done < n {
        for (i, q) in q.chunks_exact(d).enumerate() {
            let tail = &mut sc[i * ld + done..i * ld + n];
            super::scores_transposed_ref(q, scale, kt, stride, start + done, tail);
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds of `super::check_group` hold.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weighted_group<E: KvElem>(
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[E],
    stride: usize,
    out: &mut [f32],
    w: usize,
) {
    let rows = out.len() / w;
    // SAFETY: a[i·lda + j], v[j·stride + t] and out[i·w + t] for i < rows,
    // j < len, t < w are in bounds (checked by the caller).
    let done = unsafe {
        let (c, o) = (a.as_ptr(), out.as_mut_ptr());
        sum_rows_group(rows, c, lda, len, v.as_ptr(), stride, o, w, w, None)
    };
    // The tails (< 8 lanes): the reference, the same operations.
    if done < w {
        for (i, o) in out.chunks_exact_mut(w).enumerate() {
            let ai = &a[i * lda..i * lda + len];
            super::weighted_rows_ref(ai, &v[done.min(v.len())..], stride, &mut o[done..]);
        }
    }
}

/// [`super::expf`] of 4 lanes (f64 inside, glibc's table by a gather);
/// every lane must have |x| < 88 (not NaN).
///
/// # Safety
/// AVX2 + FMA.
#[inline(always)]
unsafe fn exp4(x: __m128) -> __m128 {
    use super::{C0, C1, C2, EXP2F_TAB, INV_LN2_N, SHIFT};
    // SAFETY: register ops; the gather reads EXP2F_TAB[ki & 31] (in bounds).
    unsafe {
        let xd = _mm256_cvtps_pd(x);
        let inv = _mm256_set1_pd(INV_LN2_N);
        let shift = _mm256_set1_pd(SHIFT);
        let kd_s = _mm256_fmadd_pd(inv, xd, shift);
        let ki = _mm256_castpd_si256(kd_s);
        let kd = _mm256_sub_pd(kd_s, shift);
        let r = _mm256_fmsub_pd(inv, xd, kd);
        let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
        let tv = _mm256_i64gather_epi64::<8>(EXP2F_TAB.as_ptr() as *const i64, idx);
        let s = _mm256_castsi256_pd(_mm256_add_epi64(tv, _mm256_slli_epi64::<47>(ki)));
        let z = _mm256_fmadd_pd(r, _mm256_set1_pd(C0), _mm256_set1_pd(C1));
        let r2 = _mm256_mul_pd(r, r);
        let y = _mm256_fmadd_pd(r, _mm256_set1_pd(C2), _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(z, r2, y);
        _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
    }
}

/// `x[i] = expf(x[i] - max)` for all `i`, 8 lanes at a time (the scalar
/// [`super::expf`]'s operations per lane); a vector with any |x - max| ≥ 88
/// or NaN (and the tail) element by element.
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_sub(x: &mut [f32], max: f32) {
    let n = x.len();
    let mut i = 0;
    // SAFETY: every access is to x[i..i + 8] with i + 8 <= n.
    unsafe {
        let m = _mm256_set1_ps(max);
        let lim = _mm256_set1_ps(88.0);
        let signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let p = x.as_mut_ptr();
        while i + 8 <= n {
            let d = _mm256_sub_ps(_mm256_loadu_ps(p.add(i)), m);
            let a = _mm256_and_ps(d, signless);
            // `a < 88` is false for NaN: those vectors take the scalar path.
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(a, lim)) == 0xFF {
                let lo = exp4(_mm256_castps256_ps128(d));
                let hi = exp4(_mm256_extractf128_ps::<1>(d));
                _mm256_storeu_ps(p.add(i), _mm256_set_m128(hi, lo));
            } else {
                for k in i..i + 8 {
                    *p.add(k) = super::expf_impl(*p.add(k) - max);
                }
            }
            i += 8;
        }
    }
    for v in &mut x[i..] {
        *v = super::expf_impl(*v - max);
    }
}
