//! AVX2 + FMA dot loops over a staged group-block (the prefill path: one
//! stage shared by every vector of the call): two 8-lane halves per row
//! group, then the canonical formula's float steps.
//!
//! `P_h` as in `avx2_direct`: for the types with small codes (`UMAX <
//! 128`), `vpmaddubsw(u, xq)` on the staged codes themselves, as many words
//! added in 16 bits as cannot overflow ([`words_in_i16`]) before one
//! `vpmaddwd`, each sum started at the prepared `-OFF · S_h`; for the 8-bit
//! and lookup types, `vpmaddubsw(|w|, sign(xq, w))` on `w = u - OFF`
//! (|w| ≤ 128, |xq| ≤ 127: no saturation), one word per `vpmaddwd`. The
//! stage is one ggml block, so each vector's sub-block sums `t` are kept
//! apart from its accumulators and meet the activation scale once, at the
//! block's end.

use super::{words_in_i16, Kind, Stage, PREP, R, VT};
use std::arch::x86_64::*;

/// Adds the contribution of the consecutive staged group-blocks `sts` to
/// the accumulators of one tile of `acc.len()` vectors (prep words of
/// vector `v`, block `kb` counted over `sts`, at `pp[v * PREP + kb * bs]`),
/// one group-block after the other.
///
/// # Safety
/// AVX2 and FMA available.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot(k: &Kind, sts: &[Stage], pp: &[u32], bs: usize, acc: &mut [[f32; R]]) {
    for (g, st) in sts.iter().enumerate() {
        // SAFETY: as this fn's; `dot_one` checks the prep words it reads.
        unsafe { dot_one(k, st, &pp[g * k.blocks() * bs..], bs, acc) };
    }
}

/// [`dot`] over one staged group-block.
///
/// # Safety
/// As [`dot`].
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_one(k: &Kind, st: &Stage, pp: &[u32], bs: usize, acc: &mut [[f32; R]]) {
    let n = acc.len();
    assert!(n <= VT && (n == 0 || pp.len() >= (k.blocks() - 1) * bs + n * PREP));
    // SAFETY: the features are enabled here; the prep words are asserted.
    unsafe {
        let g = words_in_i16(k.umax, k.sub / 4);
        match (k.umax > 127, g, k.sub == 16, k.asym) {
            (false, 2, true, false) if k.iscale => {
                dot_with::<false, 2, true, false, true>(k, st, pp, bs, acc)
            }
            (true, _, false, false) if k.iscale => {
                dot_with::<true, 1, false, false, true>(k, st, pp, bs, acc)
            }
            (true, _, false, false) => dot_with::<true, 1, false, false, false>(k, st, pp, bs, acc),
            (false, 8, false, false) => {
                dot_with::<false, 8, false, false, false>(k, st, pp, bs, acc)
            }
            (false, 8, false, true) => dot_with::<false, 8, false, true, false>(k, st, pp, bs, acc),
            (false, 4, false, false) => {
                dot_with::<false, 4, false, false, false>(k, st, pp, bs, acc)
            }
            (false, 4, false, true) => dot_with::<false, 4, false, true, false>(k, st, pp, bs, acc),
            (false, 4, true, false) => dot_with::<false, 4, true, false, false>(k, st, pp, bs, acc),
            (false, 4, true, true) => dot_with::<false, 4, true, true, false>(k, st, pp, bs, acc),
            shape => unreachable!("{}: no AVX2 dot for the shape {shape:?}", k.t),
        }
    }
}

/// The `vpmaddwd` operands that apply integer scales `si` (one i32 per
/// row lane, `|sc| ≤ 128`) in 16 bits: `sc` in both halves of each lane (for
/// the pair sums), and `OFF · sc` in the low half only (for the start
/// `-OFF · S_h`, from `S_h` broadcast as an i32: its high half, the sign,
/// meets the zero). Every product fits: `|OFF · sc| ≤ 128 · 32` for the
/// kinds on the unsigned path (OFF 32).
///
/// # Safety
/// AVX2 available.
#[inline(always)]
pub(super) unsafe fn scale_pairs(si: __m256i, off: i32) -> (__m256i, __m256i) {
    // SAFETY: register-only.
    unsafe {
        let low = _mm256_set1_epi32(0xFFFF);
        let both = _mm256_or_si256(_mm256_and_si256(si, low), _mm256_slli_epi32::<16>(si));
        let offsc = _mm256_and_si256(_mm256_mullo_epi16(si, _mm256_set1_epi32(off)), low);
        (both, offsc)
    }
}

/// `P_h` of sub-block `hh` of the staged block for the vector whose prep
/// words are at `q` (integer scales: `sc_h · P_h`, each pair sum scaled by
/// its `vpmaddwd` with `mul` and the start `-OFF · S_h` by one with
/// `offsc`; else `mul` is all ones). `signed`: `aw`/`sw` are `|w|` and `w`
/// (else `aw` holds the codes); `g` words per 16-bit sum; `asym`, `iscale`:
/// the kind's. The tile ([`dot_with`]) and the direct path
/// (`avx2_direct::tile`) both call it with constants, which inlining folds.
/// A function, not a closure: closures do not inherit the caller's target
/// features, and this one grew past what the compiler inlined (its
/// intrinsics became calls: 80× slower).
///
/// # Safety
/// AVX2 available; `q` readable for the block's prep words; as [`dot_with`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn psum(
    (signed, g, asym, iscale): (bool, usize, bool, bool),
    q: *const u32,
    hh: usize,
    words: usize,
    aw: &[__m256i; 8],
    sw: &[__m256i; 8],
    mul: __m256i,
    offsc: __m256i,
) -> __m256i {
    // SAFETY: per this fn's contract.
    unsafe {
        // Asymmetric kinds have OFF 0: their sums start at zero.
        let mut p = if signed || asym {
            _mm256_setzero_si256()
        } else if iscale {
            let sh = _mm256_set1_epi32(q.add(13 + hh).read() as i32);
            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(sh, offsc))
        } else {
            _mm256_set1_epi32(q.add(9 + hh).read() as i32)
        };
        let (mut j, end) = (hh * words, (hh + 1) * words);
        while j < end {
            let mut s16 = _mm256_setzero_si256();
            for t in j..(j + g).min(end) {
                let x = _mm256_set1_epi32(q.add(t).read() as i32);
                let prod = if signed {
                    _mm256_maddubs_epi16(aw[t], _mm256_sign_epi8(x, sw[t]))
                } else {
                    _mm256_maddubs_epi16(aw[t], x)
                };
                s16 = if t == j {
                    prod
                } else {
                    _mm256_add_epi16(s16, prod)
                };
            }
            p = _mm256_add_epi32(p, _mm256_madd_epi16(s16, mul));
            j += g;
        }
        p
    }
}

/// [`dot`] with the kind's shape fixed at compile time (so the word loops
/// unroll and the codes stay in registers): `SIGNED` the sign trick, else
/// `G` words per 16-bit sum; `SUB16` 16-element sub-blocks; `ASYM` mins.
///
/// # Safety
/// As [`dot`], with its prep words checked; `G` no more than
/// [`words_in_i16`] allows for the kind, `SUB16` and `ASYM` the kind's.
#[inline(always)]
unsafe fn dot_with<
    const SIGNED: bool,
    const G: usize,
    const SUB16: bool,
    const ASYM: bool,
    const ISCALE: bool,
>(
    k: &Kind,
    st: &Stage,
    pp: &[u32],
    bs: usize,
    acc: &mut [[f32; R]],
) {
    debug_assert!(SUB16 == (k.sub == 16) && ASYM == k.asym && ISCALE == k.iscale);
    let per = if SUB16 { 2 } else { 1 };
    let words = 8 / per;
    // SAFETY: all loads are inside the stage (codes of blocks < k.blocks(),
    // scales/mins of sub-blocks < k.subs()) or the asserted prep words;
    // the stores are to `acc`.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let off = _mm256_set1_epi8(k.off as i8);
        for half in 0..2 {
            // The ggml block's sub-block sums per vector (the formula's
            // `t`, or `T` for integer scales).
            let mut ts = [_mm256_setzero_ps(); VT];
            let mut tsi = [_mm256_setzero_si256(); VT];
            for kb in 0..k.blocks() {
                // The codes of this half (the sign path's |w| and w).
                let mut aw = [_mm256_setzero_si256(); 8];
                let mut sw = [_mm256_setzero_si256(); 8];
                for j in 0..8 {
                    let u = _mm256_load_si256(
                        st.codes[kb].as_ptr().add(64 * j + 32 * half) as *const __m256i
                    );
                    if SIGNED {
                        let w = _mm256_sub_epi8(u, off);
                        aw[j] = _mm256_abs_epi8(w);
                        sw[j] = w;
                    } else {
                        aw[j] = u;
                    }
                }
                for hh in 0..per {
                    let h = kb * per + hh;
                    let s = _mm256_loadu_ps(st.scales[h].as_ptr().add(8 * half));
                    let si = _mm256_loadu_si256(st.iscales[h].as_ptr().add(8 * half).cast());
                    let (mul, offsc) = if ISCALE {
                        scale_pairs(si, k.off)
                    } else {
                        (ones, ones)
                    };
                    let m = _mm256_loadu_ps(st.mins[h].as_ptr().add(8 * half));
                    // P_h of the vector whose prep words are at `q` (integer
                    // scales: `sc_h · P_h`, each pair sum scaled by its
                    // `vpmaddwd` and the start `-OFF · S_h` by one more).
                    let psum = |q: *const u32| -> __m256i {
                        let shape = (SIGNED, G, ASYM, ISCALE);
                        psum(shape, q, hh, words, &aw, &sw, mul, offsc)
                    };
                    let fin = |t: &mut __m256, ti: &mut __m256i, p: __m256i, q: *const u32| {
                        if ISCALE {
                            *ti = _mm256_add_epi32(*ti, p);
                            return;
                        }
                        *t = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(p), *t);
                        if ASYM {
                            let sx = _mm256_set1_ps(f32::from_bits(q.add(11 + hh).read()));
                            *t = _mm256_fmadd_ps(m, sx, *t);
                        }
                    };
                    // Two vectors per step: their independent chains
                    // (maddubs → adds → cvt → fma) overlap.
                    let n = acc.len();
                    let mut v = 0;
                    while v + 2 <= n {
                        let q0 = pp.as_ptr().add(v * PREP + kb * bs);
                        let q1 = q0.add(PREP);
                        let (p0, p1) = (psum(q0), psum(q1));
                        let (t0, t1) = ts.split_at_mut(v + 1);
                        let (i0, i1) = tsi.split_at_mut(v + 1);
                        fin(&mut t0[v], &mut i0[v], p0, q0);
                        fin(&mut t1[0], &mut i1[0], p1, q1);
                        v += 2;
                    }
                    if v < n {
                        let q0 = pp.as_ptr().add(v * PREP + kb * bs);
                        fin(&mut ts[v], &mut tsi[v], psum(q0), q0);
                    }
                }
            }
            if ISCALE {
                let dd = _mm256_loadu_ps(st.d.as_ptr().add(8 * half));
                for (t, i) in ts.iter_mut().zip(&tsi) {
                    *t = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(*i));
                }
            }
            // The block's activation scale, once per ggml block.
            for (v, (a, t)) in acc.iter_mut().zip(&ts).enumerate() {
                let d = _mm256_set1_ps(f32::from_bits(pp.as_ptr().add(v * PREP + 8).read()));
                let ap = a.as_mut_ptr().add(8 * half);
                _mm256_storeu_ps(ap, _mm256_fmadd_ps(d, *t, _mm256_loadu_ps(ap)));
            }
        }
    }
}
