//! AVX2 activation quantization (the scalar quantizer's codes, scales and
//! lane sums, bit for bit).

use super::QA;
use std::arch::x86_64::*;

/// AVX2 [`super::quantize_blocks`]: the scalar quantizer's codes, scales
/// and lane sums bit for bit (the same `amax / 127`, `1 / d`, products,
/// round-half-away and clamp); a block whose products are NaN or huge (an
/// infinite or NaN input, a subnormal-only block) goes to the scalar
/// [`super::quantize_block_amax`]; each run of `span` blocks shares the
/// scale of its largest `|x|`.
///
/// # Safety
/// AVX2, FMA and F16C available; `q.len() == x.len()`, `d.len() ==
/// x.len() / 32`, `ls.len() == x.len() / 4`.
#[target_feature(enable = "avx2,fma,f16c")]
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
    let signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let half = _mm256_set1_ps(0.5);
    let mhalf = _mm256_set1_ps(-0.5);
    let huge = _mm256_set1_ps(1.0e9);
    let (lo, hi) = (_mm256_set1_epi32(-127), _mm256_set1_epi32(127));
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    let mut amax = 0f32;
    for k in 0..nb {
        if k % span == 0 {
            // max(|x|, acc) returns acc where |x| is NaN: NaNs are ignored, as
            // by the scalar fold's f32::max (and the max is exact in any order).
            let mut m = _mm256_setzero_ps();
            for i in 0..4 * span {
                // SAFETY: span k/span reads x[32k..32(k+span)] (asserted lengths).
                let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(k * QA + 8 * i)) };
                m = _mm256_max_ps(_mm256_and_ps(v, signless), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
            amax = _mm_cvtss_f32(m1);
        }
        // SAFETY: block k reads x[32k..32k+32] (asserted lengths).
        let xs: [__m256; 4] = unsafe {
            let xp = x.as_ptr().add(k * QA);
            [
                _mm256_loadu_ps(xp),
                _mm256_loadu_ps(xp.add(8)),
                _mm256_loadu_ps(xp.add(16)),
                _mm256_loadu_ps(xp.add(24)),
            ]
        };
        let db = amax / 127.0;
        let id = if db != 0.0 { 1.0 / db } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let mut p = [_mm256_setzero_ps(); 4];
        let mut bad = _mm256_setzero_ps();
        for (p, &v) in p.iter_mut().zip(&xs) {
            *p = _mm256_mul_ps(v, idv);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_UNORD_Q>(*p, *p));
            bad = _mm256_or_ps(
                bad,
                _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_and_ps(*p, signless), huge),
            );
        }
        if _mm256_movemask_ps(bad) != 0 {
            super::quantize_block_amax(
                &x[k * QA..(k + 1) * QA],
                &mut q[k * QA..(k + 1) * QA],
                &mut d[k],
                &mut ls[k * 8..(k + 1) * 8],
                amax,
            );
            continue;
        }
        let mut r = [_mm256_setzero_si256(); 4];
        for (r, &p) in r.iter_mut().zip(&p) {
            let t = _mm256_cvttps_epi32(p);
            let f = _mm256_sub_ps(p, _mm256_cvtepi32_ps(t));
            // The comparisons' masks are -1 where true.
            let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(f, half));
            let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(f, mhalf));
            let t = _mm256_add_epi32(_mm256_sub_epi32(t, up), down);
            *r = _mm256_min_epi32(_mm256_max_epi32(t, lo), hi);
        }
        // Packing interleaves the four 8-lane vectors by 128-bit lane; the
        // permutation puts their 4-code dwords back in element order.
        let q16a = _mm256_packs_epi32(r[0], r[1]);
        let q16b = _mm256_packs_epi32(r[2], r[3]);
        let q32 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), order);
        let s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q32), ones16);
        // SAFETY: block k writes q[32k..32k+32] and ls[8k..8k+8] (asserted
        // lengths).
        unsafe {
            _mm256_storeu_si256(q.as_mut_ptr().add(k * QA) as *mut __m256i, q32);
            _mm256_storeu_si256(ls.as_mut_ptr().add(k * 8) as *mut __m256i, s);
        }
        d[k] = half::f16::from_f32(db).to_f32();
    }
}
