//! The AVX2 register path for few vectors (decode, `n ≤ VT`): each
//! group-block's codes are decoded into registers and dotted at once,
//! without the stage round trip of the prefill path (store 8 words, load
//! them back, offset, `abs`, `sign`), the AVX2 counterpart of AVX-512's
//! `dot_direct`.
//!
//! `P_h` comes from `vpmaddubsw(u, xq)` on the unsigned codes themselves
//! whenever they are small (every type but the 8-bit and lookup ones,
//! whose codes `u = w + 128` reach 255): each 16-bit lane is a sum of two
//! products of at most `UMAX · 127`, so as many words as keep
//! `2 · UMAX · 127 · words ≤ 32767` are added in 16 bits before one
//! `vpmaddwd` widens them (8 words for the 4-bit types, 4 for the 5-bit, 2
//! for Q6_K), and each sum starts at the prepared `-OFF · S_h`. The 8-bit
//! and lookup types take `w = u - 128` and `vpmaddubsw(|w|, sign(xq, w))`
//! as the prefill loop does (`|w| ≤ 128`: one word per `vpmaddwd`). Every
//! sum is the exact integer `P_h`, so the results are the canonical
//! formula's bits (tests hold every width to the scalar reference).
//!
//! A register holds 8 rows, so each group-block is run in two halves, each
//! with its 8 rows' accumulators loaded from and stored back to the
//! caller's (each row still sees its blocks in order).

use super::avx2::psum;
use super::avx2_decode::{with_dec, Dec};
use super::{decode_scalar, prefetch_l2, words_in_i16, Kind, Stage, PF_BYTES_AVX2, PREP, R, VT};
use std::arch::x86_64::*;

/// Adds row group `grp`'s contribution (all its group-blocks, in order) to
/// the accumulators of `acc.len() ≤ VT` vectors; vector `v`'s prep words
/// for 32-element block `b` of the group are at `pp[v * PREP + b * bs]`.
///
/// # Safety
/// AVX2, FMA and F16C available.
///
/// # Panics
/// If `grp` is not whole group-blocks, `acc` is wider than [`VT`], or `pp`
/// is shorter than the blocks need.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_direct(
    k: &Kind,
    grp: &[u8],
    st: &mut Stage,
    pp: &[u32],
    bs: usize,
    acc: &mut [[f32; R]],
) {
    let n = acc.len();
    let gbs = k.group_block();
    let ngb = grp.len() / gbs;
    let nblk = ngb * k.blocks();
    assert!(grp.len() == ngb * gbs);
    assert!(n <= VT && (n == 0 || nblk == 0 || pp.len() >= (nblk - 1) * bs + n * PREP));
    // SAFETY: the features are enabled here; the decoders read only inside
    // the group-blocks of `grp`, the tiles the asserted prep words, and
    // they write the stage and `acc`.
    unsafe {
        let (p, a) = (pp.as_ptr(), acc.as_mut_ptr());
        let done = with_dec!(k, grp.as_ptr(), |d| tiles(k, d, st, ngb, p, bs, a, n));
        if done.is_none() {
            // No AVX2 decoder for the type: stage each group-block.
            for g in 0..ngb {
                decode_scalar(k, &grp[g * gbs..(g + 1) * gbs], st);
                super::avx2::dot(
                    k,
                    std::slice::from_ref(st),
                    &pp[g * k.blocks() * bs..],
                    bs,
                    acc,
                );
            }
        }
    }
}

/// [`tile`] dispatched on the width.
///
/// # Safety
/// As [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tiles<D: Dec>(
    k: &Kind,
    d: D,
    st: &mut Stage,
    ngb: usize,
    p: *const u32,
    bs: usize,
    a: *mut [f32; R],
    n: usize,
) {
    macro_rules! go {
        ($n:expr) => {
            tile::<{ $n }, D>(k, d, st, ngb, p, bs, a)
        };
    }
    // SAFETY: per this fn's contract.
    unsafe {
        match n {
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            4 => go!(4),
            5 => go!(5),
            6 => go!(6),
            7 => go!(7),
            8 => go!(8),
            _ => {}
        }
    }
}

#[inline(always)]
unsafe fn bf(p: *const u32, i: usize) -> __m256 {
    // SAFETY: the caller guarantees a readable word.
    unsafe { _mm256_set1_ps(f32::from_bits(p.add(i).read())) }
}

/// `N` vectors over the `ngb` group-blocks from `d`'s: the canonical
/// formula per (row lane, vector).
///
/// # Safety
/// AVX2, FMA and F16C available; `ngb` group-blocks readable from `d`'s;
/// `N` vectors' prep words at `p0` (block stride `bs`) for their
/// `ngb · BLOCKS` blocks; `N` accumulators at `a`.
#[inline(always)]
unsafe fn tile<const N: usize, D: Dec>(
    k: &Kind,
    d: D,
    st: &mut Stage,
    ngb: usize,
    p0: *const u32,
    bs: usize,
    a: *mut [f32; R],
) {
    debug_assert!(D::SUB16 == (k.sub == 16) && D::ASYM == k.asym && D::BLOCKS == k.blocks());
    debug_assert_eq!(D::UMAX, k.umax);
    let per = if D::SUB16 { 2 } else { 1 };
    let words = 8 / per;
    let signed = D::UMAX > 127;
    let gw = if signed {
        1
    } else {
        words_in_i16(D::UMAX, words)
    };
    let gbs = k.group_block();
    let first = d.ptr();
    // SAFETY: every read is inside the group-blocks, the stage or the
    // vectors' prep words of this row group; the stores are to the stage
    // and the N accumulators.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(i8::MIN);
        for g in 0..ngb {
            let gp = first.add(g * gbs);
            let d = D::new(gp);
            let p = p0.add(g * D::BLOCKS * bs);
            for h in 0..2 {
                d.scales(h, st);
                // The ggml block's sub-block sums per vector (the formula's
                // `t`, or `T` for integer scales).
                let mut acc = [_mm256_setzero_ps(); N];
                let mut acci = [_mm256_setzero_si256(); N];
                for kb in 0..D::BLOCKS {
                    if h == 0 {
                        // The look-ahead spread over the blocks: a burst of
                        // a whole group-block's hints stalls on full miss
                        // buffers.
                        let part = gbs.div_ceil(64 * D::BLOCKS) * 64;
                        let from = (kb * part).min(gbs);
                        let len = part.min(gbs - from);
                        prefetch_l2(gp.wrapping_add(PF_BYTES_AVX2 + from), len);
                    }
                    let c = d.block(kb, h);
                    // The signed path's w and |w| (the codes otherwise).
                    let (mut sw, mut aw) = (c, c);
                    if signed {
                        for j in 0..8 {
                            sw[j] = _mm256_xor_si256(c[j], flip);
                            aw[j] = _mm256_abs_epi8(sw[j]);
                        }
                    }
                    for hh in 0..per {
                        let sb = kb * per + hh;
                        let s = _mm256_loadu_ps(st.scales[sb].as_ptr().add(8 * h));
                        let si = _mm256_loadu_si256(st.iscales[sb].as_ptr().add(8 * h).cast());
                        let (mul, offsc) = if D::ISCALE {
                            super::avx2::scale_pairs(si, k.off)
                        } else {
                            (ones, ones)
                        };
                        let m = if D::ASYM {
                            _mm256_loadu_ps(st.mins[sb].as_ptr().add(8 * h))
                        } else {
                            _mm256_setzero_ps()
                        };
                        for (v, (x, xi)) in acc.iter_mut().zip(&mut acci).enumerate() {
                            let q = p.add(v * PREP + kb * bs);
                            // P_h as the tile sums it (`avx2::psum`).
                            let shape = (signed, gw, D::ASYM, D::ISCALE);
                            let i = psum(shape, q, hh, words, &aw, &sw, mul, offsc);
                            if D::ISCALE {
                                *xi = _mm256_add_epi32(*xi, i);
                                continue;
                            }
                            *x = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(i), *x);
                            if D::ASYM {
                                *x = _mm256_fmadd_ps(m, bf(q, 11 + hh), *x);
                            }
                        }
                    }
                }
                if D::ISCALE {
                    let dd = _mm256_loadu_ps(st.d.as_ptr().add(8 * h));
                    for (x, i) in acc.iter_mut().zip(&acci) {
                        *x = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(*i));
                    }
                }
                // The block's activation scale, once per ggml block.
                for (v, t) in acc.iter().enumerate() {
                    let ap = (*a.add(v)).as_mut_ptr().add(8 * h);
                    let x = _mm256_fmadd_ps(bf(p, v * PREP + 8), *t, _mm256_loadu_ps(ap));
                    _mm256_storeu_ps(ap, x);
                }
            }
        }
    }
}
