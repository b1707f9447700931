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

use super::lanes::{self, sum_rows_k, Lanes};
use super::KvElem;
use std::arch::x86_64::*;

/// 8 f32 lanes of a 256-bit register.
pub(super) struct Avx2;

impl Lanes for Avx2 {
    type V = __m256;
    const W: usize = 8;
    const MASKED: bool = false;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: AVX (the caller's contract).
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: FMA (the caller's contract).
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: AVX.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn load<E: KvElem>(p: *const E, k: usize) -> __m256 {
        debug_assert_eq!(k, 8);
        // SAFETY: the caller's bounds (8 elements); F16C for an f16 cache.
        unsafe { E::load8(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256, k: usize) {
        debug_assert_eq!(k, 8);
        // SAFETY: the caller's bounds (8 f32).
        unsafe { _mm256_storeu_ps(p, v) }
    }

    #[inline(always)]
    unsafe fn load_i8(p: *const u8, k: usize) -> __m256 {
        debug_assert_eq!(k, 8);
        // SAFETY: the caller's bounds (8 bytes).
        unsafe {
            let b = _mm_loadl_epi64(p as *const __m128i);
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))
        }
    }
    #[inline(always)]
    unsafe fn load_nib(p: *const u8, k: usize, hi: bool) -> __m256 {
        debug_assert_eq!(k, 8);
        // SAFETY: the caller's bounds (8 bytes).
        unsafe {
            let b = _mm_loadl_epi64(p as *const __m128i);
            let b = if hi { _mm_srli_epi16::<4>(b) } else { b };
            let b = _mm_and_si128(b, _mm_set1_epi8(15));
            let x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
            _mm256_sub_ps(x, _mm256_set1_ps(8.0))
        }
    }
    fn q_vectors(m: usize) -> usize {
        match m {
            1 => 4,
            2 => 2,
            _ => 1,
        }
    }
    fn q_weighted_shape() -> (usize, usize) {
        (2, 1)
    }

    /// 64 lanes per pass for one row, 16 for several, then 8; the tail
    /// narrower than 8 is the caller's.
    #[inline(always)]
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
        _wide: bool,
    ) -> usize {
        // SAFETY: every access stays below n (the caller's bounds).
        unsafe {
            let mut o = 0;
            while M == 1 && o + 64 <= n {
                sum_rows_k::<Self, M, 8, E>(c, cs, len, m, stride, o, out, os, 8, scale);
                o += 64;
            }
            while M > 1 && o + 16 <= n {
                sum_rows_k::<Self, M, 2, E>(c, cs, len, m, stride, o, out, os, 8, scale);
                o += 16;
            }
            while o + 8 <= n {
                sum_rows_k::<Self, M, 1, E>(c, cs, len, m, stride, o, out, os, 8, scale);
                o += 8;
            }
            o
        }
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
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::scores_transposed::<Avx2, E>(q, scale, kt, stride, start, sc) }
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds of `super::check_rows` hold.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weighted_rows<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::weighted_rows::<Avx2, E>(a, v, stride, out) }
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
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::scores_group::<Avx2, E>(q, d, scale, kt, stride, start, n, sc, ld) }
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
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::weighted_group::<Avx2, E>(a, lda, len, v, stride, out, w) }
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

/// # Safety
/// AVX2, FMA and F16C available; the bounds `kvq::scores_group_on` checks hold.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn q_scores(
    t: super::kvq::KvQuant,
    q: &[f32],
    d: usize,
    scale: f32,
    blk: &[u8],
    kb: usize,
    start: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) -> usize {
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::q_scores::<Avx2>(t, q, d, scale, blk, kb, start, n, sc, ld) }
}

/// # Safety
/// AVX2, FMA and F16C available; the bounds `kvq::weighted_group_on` checks hold.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q_weighted(
    t: super::kvq::KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
) -> usize {
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::q_weighted::<Avx2>(t, a, lda, len, v, out, w) }
}
