//! AVX-512F paths of the attention helpers: 16 lanes per vector
//! ([`Avx512`]), tails masked, the sums those of `lanes.rs`; and the
//! vectorized `expf` of the softmax.

use super::lanes::{self, sum_rows_k, Lanes};
use super::KvElem;
use std::arch::x86_64::*;

/// 16 f32 lanes of a 512-bit register.
pub(super) struct Avx512;

/// Lanes `0..k` set (k ≤ 16).
#[inline(always)]
fn mask(k: usize) -> __mmask16 {
    ((1u32 << k) - 1) as __mmask16
}

impl Lanes for Avx512 {
    type V = __m512;
    const W: usize = 16;
    const MASKED: bool = true;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        // SAFETY: AVX-512F (the caller's contract).
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn load<E: KvElem>(p: *const E, k: usize) -> __m512 {
        // SAFETY: the caller's bounds: lanes 0..k readable (the rest masked).
        unsafe { E::load16(p, mask(k)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512, k: usize) {
        // SAFETY: the caller's bounds: lanes 0..k writable (the rest masked).
        unsafe {
            if k == 16 {
                _mm512_storeu_ps(p, v);
            } else {
                _mm512_mask_storeu_ps(p, mask(k), v);
            }
        }
    }

    #[inline(always)]
    unsafe fn load_i8(p: *const u8, k: usize) -> __m512 {
        // SAFETY: the caller's bounds: bytes 0..k readable (the rest masked).
        unsafe {
            let b = if k == 16 {
                _mm_loadu_si128(p as *const __m128i)
            } else {
                _mm_maskz_loadu_epi8(mask(k), p as *const i8)
            };
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b))
        }
    }
    #[inline(always)]
    unsafe fn load_nib(p: *const u8, k: usize, hi: bool) -> __m512 {
        // SAFETY: as above.
        unsafe {
            let b = if k == 16 {
                _mm_loadu_si128(p as *const __m128i)
            } else {
                _mm_maskz_loadu_epi8(mask(k), p as *const i8)
            };
            let b = if hi { _mm_srli_epi16::<4>(b) } else { b };
            let b = _mm_and_si128(b, _mm_set1_epi8(15));
            let x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
            _mm512_sub_ps(x, _mm512_set1_ps(8.0))
        }
    }
    fn q_vectors(m: usize) -> usize {
        if m <= 2 {
            4
        } else {
            2
        }
    }
    fn q_weighted_shape() -> (usize, usize) {
        (4, 2)
    }

    /// 128 lanes per pass for one row of long rows (`wide`: the scores),
    /// else 64, then the masked tail (1 to 4 vectors).
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
        wide: bool,
    ) -> usize {
        // SAFETY: every call stays below n (the caller's bounds).
        unsafe {
            let mut o = 0;
            while M == 1 && wide && o + 128 <= n {
                sum_rows_k::<Self, M, 8, E>(c, cs, len, m, stride, o, out, os, 16, scale);
                o += 128;
            }
            while o + 64 <= n {
                sum_rows_k::<Self, M, 4, E>(c, cs, len, m, stride, o, out, os, 16, scale);
                o += 64;
            }
            let r = n - o;
            let last = |k: usize| r - 16 * (k - 1);
            match r.div_ceil(16) {
                0 => {}
                1 => sum_rows_k::<Self, M, 1, E>(c, cs, len, m, stride, o, out, os, last(1), scale),
                2 => sum_rows_k::<Self, M, 2, E>(c, cs, len, m, stride, o, out, os, last(2), scale),
                3 => sum_rows_k::<Self, M, 3, E>(c, cs, len, m, stride, o, out, os, last(3), scale),
                _ => sum_rows_k::<Self, M, 4, E>(c, cs, len, m, stride, o, out, os, last(4), scale),
            }
            n
        }
    }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds of `super::check_group` hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
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
    unsafe { lanes::scores_group::<Avx512, E>(q, d, scale, kt, stride, start, n, sc, ld) }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds of `super::check_group` hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
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
    unsafe { lanes::weighted_group::<Avx512, E>(a, lda, len, v, stride, out, w) }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds of `super::check_scores` hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn scores_transposed<E: KvElem>(
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::scores_transposed::<Avx512, E>(q, scale, kt, stride, start, sc) }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds of `super::check_rows` hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn weighted_rows<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    // SAFETY: forwarded caller guarantees.
    unsafe { lanes::weighted_rows::<Avx512, E>(a, v, stride, out) }
}

/// `x[i] = expf(x[i] - max)` for all `i`, 16 lanes at a time; a vector
/// with any |x - max| >= 88 or NaN (and the tail) element by element.
///
/// # Safety
/// AVX-512F + FMA.
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn exp_sub(x: &mut [f32], max: f32) {
    let n = x.len();
    let m = _mm512_set1_ps(max);
    let lim = _mm512_set1_ps(88.0);
    let signless = _mm512_set1_epi32(0x7FFF_FFFF);
    let mut i = 0;
    // SAFETY: every access is to x[i..i + 16] with i + 16 <= n.
    unsafe {
        let p = x.as_mut_ptr();
        while i + 16 <= n {
            let d = _mm512_sub_ps(_mm512_loadu_ps(p.add(i)), m);
            let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(d), signless));
            // `a < 88` is false for NaN: those vectors take the scalar path.
            if _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, lim) == 0xFFFF {
                let lo = super::avx512_exp::exp8(_mm512_castps512_ps256(d));
                let hi = super::avx512_exp::exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                    _mm512_castps_pd(d),
                    1,
                )));
                _mm256_storeu_ps(p.add(i), lo);
                _mm256_storeu_ps(p.add(i + 8), hi);
            } else {
                for k in i..i + 16 {
                    *p.add(k) = super::expf_impl(*p.add(k) - max);
                }
            }
            i += 16;
        }
    }
    for v in &mut x[i..] {
        *v = super::expf_impl(*v - max);
    }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds `kvq::scores_group_on` checks hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
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
    unsafe { lanes::q_scores::<Avx512>(t, q, d, scale, blk, kb, start, n, sc, ld) }
}

/// # Safety
/// AVX-512F/BW/VL; the bounds `kvq::weighted_group_on` checks hold.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
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
    unsafe { lanes::q_weighted::<Avx512>(t, a, lda, len, v, out, w) }
}
