//! AVX-512 activation quantization (the scalar quantizer's codes, scales
//! and lane sums, bit for bit).

use super::QA;
use std::arch::x86_64::*;

/// Activation quantization of whole blocks (`x.len()` a multiple of
/// `32 · span`), the same operations per element as
/// `super::quantize_block_amax`: |x| max over each span (NaN ignored, as
/// `f32::max`), `d = amax / 127`, `q = roundf(x · (1/d))` as
/// truncation plus a ±0.5 test of the exact remainder, clamp to ±127, the f16
/// rounding of `d` (scalar, per block), lane sums by `vpdpbusd` with ones.
/// A block with a non-finite product (NaN or infinite inputs) goes to the
/// scalar code, whose saturating casts the vector conversion does not copy.
///
/// # Safety
/// `Isa::Avx512Vnni.is_available()`; `q.len() == x.len()`, `d.len() ==
/// x.len() / 32`, `ls.len() == x.len() / 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn quantize_blocks(
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    ls: &mut [i32],
    span: usize,
) {
    let nb = x.len() / QA;
    assert!(q.len() == nb * QA && d.len() == nb && ls.len() == nb * 8);
    assert!(span > 0 && nb.is_multiple_of(span));
    // SAFETY: block k reads x[32k..32k+32] and writes q[32k..32k+32], d[k],
    // ls[8k..8k+8], and span k/span reads x[32k..32(k+span)], all in bounds
    // (asserted above).
    unsafe {
        let signless = _mm512_set1_epi32(0x7FFF_FFFF);
        let half = _mm512_set1_ps(0.5);
        let mhalf = _mm512_set1_ps(-0.5);
        let one = _mm512_set1_epi32(1);
        let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
        let ones8 = _mm256_set1_epi8(1);
        let mut amax = 0f32;
        for k in 0..nb {
            let xp = x.as_ptr().add(k * QA);
            if k % span == 0 {
                // max(|x|, acc) returns acc where |x| is NaN: NaNs are
                // ignored (and the max is exact in any order).
                let mut m = _mm512_setzero_ps();
                for i in 0..2 * span {
                    let a = _mm512_and_si512(_mm512_loadu_si512(xp.add(16 * i).cast()), signless);
                    m = _mm512_max_ps(_mm512_castsi512_ps(a), m);
                }
                amax = _mm512_reduce_max_ps(m);
            }
            let x0 = _mm512_loadu_ps(xp);
            let x1 = _mm512_loadu_ps(xp.add(16));
            let db = amax / 127.0;
            let id = if db != 0.0 { 1.0 / db } else { 0.0 };
            let idv = _mm512_set1_ps(id);
            let p0 = _mm512_mul_ps(x0, idv);
            let p1 = _mm512_mul_ps(x1, idv);
            let bad = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(p0, p0)
                | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(p1, p1)
                | _mm512_cmp_ps_mask::<_CMP_GE_OQ>(
                    _mm512_max_ps(
                        _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(p0), signless)),
                        _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(p1), signless)),
                    ),
                    _mm512_set1_ps(1.0e9),
                );
            let qb = std::slice::from_raw_parts_mut(q.as_mut_ptr().add(k * QA), QA);
            let lsb = std::slice::from_raw_parts_mut(ls.as_mut_ptr().add(k * 8), 8);
            if bad != 0 {
                super::quantize_block_amax(
                    std::slice::from_raw_parts(xp, QA),
                    qb,
                    &mut *d.as_mut_ptr().add(k),
                    lsb,
                    amax,
                );
                continue;
            }
            let round = |p: __m512| -> __m512i {
                let t = _mm512_cvttps_epi32(p);
                let f = _mm512_sub_ps(p, _mm512_cvtepi32_ps(t));
                let t = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(f, half), t, one);
                let t =
                    _mm512_mask_sub_epi32(t, _mm512_cmp_ps_mask::<_CMP_LE_OQ>(f, mhalf), t, one);
                _mm512_min_epi32(_mm512_max_epi32(t, lo), hi)
            };
            let q0 = _mm512_cvtepi32_epi8(round(p0));
            let q1 = _mm512_cvtepi32_epi8(round(p1));
            let q32 = _mm256_set_m128i(q1, q0);
            _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, q32);
            *d.as_mut_ptr().add(k) = half::f16::from_f32(db).to_f32();
            let s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones8, q32);
            _mm256_storeu_si256(lsb.as_mut_ptr() as *mut __m256i, s);
        }
    }
}
