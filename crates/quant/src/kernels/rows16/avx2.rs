//! AVX2 + FMA dot loops for the row-interleaved layouts: two 8-lane halves
//! per row group, `P_h` from `vpmaddubsw(|w|, sign(xq, w))` on the signed
//! values `w = u - OFF` (|w| ≤ 128, |xq| ≤ 127: no saturation), then the
//! canonical formula's float steps.

use super::{Kind, Stage, PREP, R};
use std::arch::x86_64::*;

/// Adds the stage's contribution to the accumulators of one tile of
/// `acc.len()` vectors (prep words of vector `v`, block `kb` at
/// `pp[v * PREP + kb * bs]`).
///
/// # Safety
/// AVX2 and FMA available.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot(k: &Kind, st: &Stage, pp: &[u32], bs: usize, acc: &mut [[f32; R]]) {
    let n = acc.len();
    assert!(n == 0 || pp.len() >= (k.blocks() - 1) * bs + n * PREP);
    let per = 32 / k.sub;
    let words = k.sub / 4;
    // SAFETY: all loads are inside the stage (codes of blocks < k.blocks(),
    // scales/mins of sub-blocks < k.subs()) or the asserted prep words;
    // the stores are to `acc`.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let off = _mm256_set1_epi8(k.off as i8);
        for half in 0..2 {
            for kb in 0..k.blocks() {
                // |w| and w for the 8 words of this half.
                let mut aw = [_mm256_setzero_si256(); 8];
                let mut sw = [_mm256_setzero_si256(); 8];
                for j in 0..8 {
                    let u = _mm256_load_si256(
                        st.codes[kb].as_ptr().add(64 * j + 32 * half) as *const __m256i
                    );
                    let w = _mm256_sub_epi8(u, off);
                    aw[j] = _mm256_abs_epi8(w);
                    sw[j] = w;
                }
                for hh in 0..per {
                    let h = kb * per + hh;
                    let s = _mm256_loadu_ps(st.scales[h].as_ptr().add(8 * half));
                    let m = _mm256_loadu_ps(st.mins[h].as_ptr().add(8 * half));
                    for (v, a) in acc.iter_mut().enumerate() {
                        let q = pp.as_ptr().add(v * PREP + kb * bs);
                        let mut p = _mm256_setzero_si256();
                        for j in hh * words..(hh + 1) * words {
                            let x = _mm256_set1_epi32(q.add(j).read() as i32);
                            let prod = _mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(x, sw[j]));
                            p = _mm256_add_epi32(p, _mm256_madd_epi16(prod, ones));
                        }
                        let d = _mm256_set1_ps(f32::from_bits(q.add(8).read()));
                        let ap = a.as_mut_ptr().add(8 * half);
                        let mut x = _mm256_loadu_ps(ap);
                        x = _mm256_fmadd_ps(_mm256_mul_ps(s, d), _mm256_cvtepi32_ps(p), x);
                        if k.asym {
                            let ds = _mm256_set1_ps(f32::from_bits(q.add(11 + hh).read()));
                            x = _mm256_fmadd_ps(m, ds, x);
                        }
                        _mm256_storeu_ps(ap, x);
                    }
                }
            }
        }
    }
}
