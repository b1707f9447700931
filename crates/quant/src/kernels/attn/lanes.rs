//! The attention sums, written once over a lane width ([`Lanes`]: 16 f32
//! lanes of AVX-512, 8 of AVX2), memchr-style: every function here is
//! `#[inline(always)]` and generic, and only ever inlined into the
//! `#[target_feature]` entry points of `avx512.rs` and `avx2.rs`, so each
//! ISA gets the code it had when the sums were written out twice.
//!
//! The one algorithm: `out[i · os + o + t] = f(Σ_r c[i · cs + r] · m[r ·
//! stride + o + t])` for `M` coefficient rows `i`, each sum in `r` order
//! from 0 with one fused multiply-add per term, `f` a multiplication by
//! `scale` when given. Both attention helpers are this: the scores (c = the
//! queries, m = the transposed keys, scaled) and the weighted value rows (c
//! = the probabilities, m = the values). `M` > 1 runs the query heads that
//! share a KV head together, each row of `m` loaded (and widened) once for
//! all of them, every element's operations those of `M` = 1. What differs by
//! ISA is only how many vectors a pass holds (32 zmm registers against 16
//! ymm: [`Lanes::sum_rows`]) and what happens to a tail narrower than a
//! vector (masked on AVX-512; the scalar reference, the same operations, on
//! AVX2: [`Lanes::MASKED`]).

use super::KvElem;

/// One SIMD width of f32 lanes.
pub(super) trait Lanes {
    /// A vector of [`Lanes::W`] f32.
    type V: Copy;
    /// Lanes per vector.
    const W: usize;
    /// Whether [`Lanes::load`]/[`Lanes::store`] take partial vectors (else
    /// [`Lanes::sum_rows`] stops at the last whole vector and the caller
    /// runs the tail on the reference).
    const MASKED: bool;

    /// All lanes zero.
    ///
    /// # Safety
    /// The ISA is available.
    unsafe fn zero() -> Self::V;
    /// All lanes `x`.
    ///
    /// # Safety
    /// The ISA is available.
    unsafe fn splat(x: f32) -> Self::V;
    /// `a · b + c`, fused.
    ///
    /// # Safety
    /// The ISA is available.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `a · b`.
    ///
    /// # Safety
    /// The ISA is available.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `k` lanes from `p` widened to f32 (the rest zero, not read).
    ///
    /// # Safety
    /// The ISA is available; `k` elements readable at `p`; `k == W` unless
    /// [`Lanes::MASKED`].
    unsafe fn load<E: KvElem>(p: *const E, k: usize) -> Self::V;
    /// `k` signed bytes from `p` as f32 (q8_0 quants; the rest zero, not read).
    ///
    /// # Safety
    /// The ISA is available; `k` bytes readable at `p`; `k == W` unless
    /// [`Lanes::MASKED`].
    unsafe fn load_i8(p: *const u8, k: usize) -> Self::V;
    /// The low (or `hi`) nibbles of `k` bytes from `p`, minus 8, as f32
    /// (q4_0 quants; the rest not read).
    ///
    /// # Safety
    /// As [`Lanes::load_i8`].
    unsafe fn load_nib(p: *const u8, k: usize, hi: bool) -> Self::V;
    /// Vectors of positions a quantized-key scores pass holds for `m` query rows.
    fn q_vectors(m: usize) -> usize;
    /// Probability rows a quantized weighted-values pass takes at most, and
    /// blocks of 32 outputs it holds (1 or 2).
    fn q_weighted_shape() -> (usize, usize);
    /// Stores the first `k` lanes of `v` at `p`.
    ///
    /// # Safety
    /// The ISA is available; `k` f32 writable at `p`; `k == W` unless
    /// [`Lanes::MASKED`].
    unsafe fn store(p: *mut f32, v: Self::V, k: usize);

    /// [`sum_rows_k`] over `out[i · os ..][..n]` for `M` rows, in passes of
    /// as many vectors as the registers hold (`wide`: long rows of one
    /// coefficient row, the scores); returns where the computed lanes end
    /// (`n` when [`Lanes::MASKED`], else the last whole vector's end).
    ///
    /// # Safety
    /// The ISA is available; `c[i · cs + r]`, `m[r · stride + t]` for `i <
    /// M`, `r < len`, `t < n` and `out[i · os ..][..n]` are in bounds.
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
        wide: bool,
    ) -> usize;
}

/// The sums of `M` coefficient rows over `K` vectors of lanes from `o`,
/// the last vector `last` lanes wide (see the module docs).
///
/// # Safety
/// The ISA of `L` is available; every `c[i · cs + r]`, `m[r · stride + o +
/// t]` read (`t < W(K-1) + last`) and `out[i · os + o + t]` written is in
/// bounds; `last == W` unless [`Lanes::MASKED`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sum_rows_k<L: Lanes, const M: usize, const K: usize, E: KvElem>(
    c: *const f32,
    cs: usize,
    len: usize,
    m: *const E,
    stride: usize,
    o: usize,
    out: *mut f32,
    os: usize,
    last: usize,
    scale: Option<f32>,
) {
    let width = |k: usize| if k + 1 == K { last } else { L::W };
    // SAFETY: the caller guarantees the bounds; the last vector is `last` wide.
    unsafe {
        let mut acc = [[L::zero(); K]; M];
        for r in 0..len {
            let p = m.add(r * stride + o);
            let mut row = [L::zero(); K];
            for (k, x) in row.iter_mut().enumerate() {
                *x = L::load(p.add(L::W * k), width(k));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let cv = L::splat(*c.add(i * cs + r));
                for (a, x) in acc.iter_mut().zip(&row) {
                    *a = L::fma(cv, *x, *a);
                }
            }
        }
        let s = scale.map(|s| L::splat(s));
        for (i, acc) in acc.iter().enumerate() {
            let out = out.add(i * os + o);
            for (k, a) in acc.iter().enumerate() {
                let v = s.map_or(*a, |s| L::mul(*a, s));
                L::store(out.add(L::W * k), v, width(k));
            }
        }
    }
}

/// [`Lanes::sum_rows`] for `rows` coefficient rows, up to 4 at a time;
/// returns where the computed lanes end.
///
/// # Safety
/// As [`Lanes::sum_rows`] for `i < rows`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sum_rows_group<L: Lanes, E: KvElem>(
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
    wide: bool,
) -> usize {
    let mut done = if L::MASKED { n } else { n / L::W * L::W };
    // SAFETY: each call covers rows i0 .. i0 + k <= rows.
    unsafe {
        let mut i0 = 0;
        while i0 < rows {
            let (c, out) = (c.add(i0 * cs), out.add(i0 * os));
            macro_rules! go {
                ($m:literal) => {
                    L::sum_rows::<$m, E>(c, cs, len, m, stride, out, os, n, scale, wide)
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

/// `sc[j] = (Σ_d q[d] · kt[d · stride + start + j]) · scale`.
///
/// # Safety
/// The ISA of `L` is available; the bounds of `super::check_scores` hold.
#[inline(always)]
pub(super) unsafe fn scores_transposed<L: Lanes, E: KvElem>(
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
        L::sum_rows::<1, E>(
            q.as_ptr(),
            0,
            q.len(),
            ktp,
            stride,
            out,
            0,
            n,
            Some(scale),
            true,
        )
    };
    if done < n {
        // The tail narrower than a vector: the reference, the same operations.
        super::scores_transposed_ref(q, scale, kt, stride, start + done, &mut sc[done..]);
    }
}

/// `out[t] = Σ_j a[j] · v[j · stride + t]`.
///
/// # Safety
/// The ISA of `L` is available; the bounds of `super::check_rows` hold.
#[inline(always)]
pub(super) unsafe fn weighted_rows<L: Lanes, E: KvElem>(
    a: &[f32],
    v: &[E],
    stride: usize,
    out: &mut [f32],
) {
    let w = out.len();
    // SAFETY: v[j·stride + i] for i < w is in bounds (checked by the
    // caller), as is out[..w].
    let done = unsafe {
        let (c, len, o) = (a.as_ptr(), a.len(), out.as_mut_ptr());
        L::sum_rows::<1, E>(c, 0, len, v.as_ptr(), stride, o, 0, w, None, false)
    };
    if done < w {
        // The tail narrower than a vector: the reference, the same operations.
        super::weighted_rows_ref(a, &v[done.min(v.len())..], stride, &mut out[done..]);
    }
}

/// The scores of the `q.len() / d` query rows sharing one KV head.
///
/// # Safety
/// The ISA of `L` is available; the bounds of `super::check_group` hold.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_group<L: Lanes, E: KvElem>(
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
        sum_rows_group::<L, E>(
            rows,
            q.as_ptr(),
            d,
            d,
            ktp,
            stride,
            out,
            ld,
            n,
            Some(scale),
            true,
        )
    };
    if done < n {
        // The tails narrower than a vector: the reference, the same operations.
        for (i, q) in q.chunks_exact(d).enumerate() {
            let tail = &mut sc[i * ld + done..i * ld + n];
            super::scores_transposed_ref(q, scale, kt, stride, start + done, tail);
        }
    }
}

/// The weighted value rows of the `out.len() / w` probability rows sharing
/// one KV head.
///
/// # Safety
/// The ISA of `L` is available; the bounds of `super::check_group` hold.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weighted_group<L: Lanes, E: KvElem>(
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
        sum_rows_group::<L, E>(rows, c, lda, len, v.as_ptr(), stride, o, w, w, None, false)
    };
    if done < w {
        // The tails narrower than a vector: the reference, the same operations.
        for (i, o) in out.chunks_exact_mut(w).enumerate() {
            let ai = &a[i * lda..i * lda + len];
            super::weighted_rows_ref(ai, &v[done.min(v.len())..], stride, &mut o[done..]);
        }
    }
}

/// One pass of the quantized-key scores (`kvq.rs` says the sums): `M`
/// query rows (`q[i · d ..]`) over `K` vectors of positions from `p0` in a
/// transposed key block `blk` (`kb` positions), the last vector `last`
/// lanes wide, stored at `out[i · ld + o ..]` times `scale`. `Q4`: q4_0
/// (else q8_0).
///
/// # Safety
/// The ISA of `L` is available; the block holds `d` dims of `kb` positions
/// and `p0 + W(K-1) + last <= kb`; `out[i · ld + o ..][..W(K-1) + last]`
/// is writable for `i < M`; `last == W` unless [`Lanes::MASKED`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q_scores_k<L: Lanes, const M: usize, const K: usize, const Q4: bool>(
    q: *const f32,
    d: usize,
    blk: *const u8,
    kb: usize,
    p0: usize,
    out: *mut f32,
    ld: usize,
    o: usize,
    last: usize,
    scale: f32,
) {
    use super::kvq::QK;
    let width = |k: usize| if k + 1 == K { last } else { L::W };
    let (bb, qrows) = if Q4 { (18, 16) } else { (34, 32) };
    // SAFETY: every read is inside the block (the caller's bounds), every
    // write inside `out`'s rows.
    unsafe {
        let mut tot = [[L::zero(); K]; M];
        for g in 0..d.div_ceil(QK) {
            let grp = blk.add(g * bb * kb);
            let qs = grp.add(2 * kb + p0);
            let mut s = [[L::zero(); K]; M];
            for r in 0..qrows {
                let row = qs.add(r * kb);
                for hi in [false, true] {
                    let dim = g * QK + r + if hi { 16 } else { 0 };
                    if (hi && !Q4) || dim >= d {
                        continue;
                    }
                    let mut x = [L::zero(); K];
                    for (k, x) in x.iter_mut().enumerate() {
                        let p = row.add(L::W * k);
                        *x = if Q4 {
                            L::load_nib(p, width(k), hi)
                        } else {
                            L::load_i8(p, width(k))
                        };
                    }
                    for (i, s) in s.iter_mut().enumerate() {
                        let cv = L::splat(*q.add(i * d + dim));
                        for (a, x) in s.iter_mut().zip(&x) {
                            *a = L::fma(cv, *x, *a);
                        }
                    }
                }
            }
            let sp = (grp as *const u16).add(p0);
            let mut dv = [L::zero(); K];
            for (k, x) in dv.iter_mut().enumerate() {
                *x = L::load::<u16>(sp.add(L::W * k), width(k));
            }
            for (t, s) in tot.iter_mut().zip(&s) {
                for ((t, s), dv) in t.iter_mut().zip(s).zip(&dv) {
                    *t = L::fma(*s, *dv, *t);
                }
            }
        }
        let sv = L::splat(scale);
        for (i, t) in tot.iter().enumerate() {
            for (k, t) in t.iter().enumerate() {
                L::store(out.add(i * ld + o + L::W * k), L::mul(*t, sv), width(k));
            }
        }
    }
}

/// The quantized-key scores of `M` query rows over positions `0..n` from
/// `start`, as many vectors a pass as [`Lanes::q_vectors`] allows; returns
/// where the computed positions end.
///
/// # Safety
/// As [`q_scores_k`] for every pass (`start + n <= kb`, `out` rows of `n`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q_scores_m<L: Lanes, const M: usize, const Q4: bool>(
    q: *const f32,
    d: usize,
    blk: *const u8,
    kb: usize,
    start: usize,
    n: usize,
    out: *mut f32,
    ld: usize,
    scale: f32,
) -> usize {
    let done = if L::MASKED { n } else { n / L::W * L::W };
    let kmax = L::q_vectors(M);
    let mut o = 0;
    // SAFETY: each pass covers positions o .. o + span <= done <= n.
    unsafe {
        while o < done {
            let r = done - o;
            let nv = r.div_ceil(L::W).min(kmax);
            let span = r.min(nv * L::W);
            let last = span - (nv - 1) * L::W;
            macro_rules! go {
                ($k:literal) => {
                    q_scores_k::<L, M, $k, Q4>(q, d, blk, kb, start + o, out, ld, o, last, scale)
                };
            }
            match nv {
                1 => go!(1),
                2 => go!(2),
                3 => go!(3),
                _ => go!(4),
            }
            o += span;
        }
    }
    done
}

/// The quantized-key scores (`kvq::scores_group`) of every query row, up
/// to 4 at a time; returns where the computed positions end (the rest is
/// the caller's, on the reference).
///
/// # Safety
/// The ISA of `L` is available; the bounds `kvq::scores_group_on` checks hold.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn q_scores<L: Lanes>(
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
    let rows = q.len() / d;
    let q4 = t == super::kvq::KvQuant::Q4_0;
    let mut done = n;
    // SAFETY: rows i0 .. i0 + k < rows of q and sc (checked by the caller).
    unsafe {
        let mut i0 = 0;
        while i0 < rows {
            let (qp, out) = (q.as_ptr().add(i0 * d), sc.as_mut_ptr().add(i0 * ld));
            let b = blk.as_ptr();
            macro_rules! go {
                ($m:literal) => {
                    if q4 {
                        q_scores_m::<L, $m, true>(qp, d, b, kb, start, n, out, ld, scale)
                    } else {
                        q_scores_m::<L, $m, false>(qp, d, b, kb, start, n, out, ld, scale)
                    }
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

/// One pass of the quantized weighted values (`kvq.rs` says the sums): `M`
/// probability rows (`a[i · lda ..][..len]`) over `NB` blocks of 32 dims
/// from block `g0` of the `len` value rows at `v` (`rb` bytes apart), into
/// `out[i · w + 32 g0 ..][..32 NB]`.
///
/// # Safety
/// The ISA of `L` is available; `L::W` divides 16; the rows and outputs
/// are in bounds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q_weighted_k<L: Lanes, const M: usize, const NB: usize, const Q4: bool>(
    a: *const f32,
    lda: usize,
    len: usize,
    v: *const u8,
    rb: usize,
    g0: usize,
    out: *mut f32,
    w: usize,
) {
    let bb = if Q4 { 18 } else { 34 };
    let vpb = 32 / L::W;
    let nv = NB * vpb;
    // SAFETY: the caller's bounds.
    unsafe {
        let mut acc = [[L::zero(); 8]; M];
        for j in 0..len {
            let row = v.add(j * rb);
            for b in 0..NB {
                let blk = row.add((g0 + b) * bb);
                let dsc = half::f16::from_bits(u16::from_le_bytes([*blk, *blk.add(1)])).to_f32();
                let mut x = [L::zero(); 8];
                for (k, x) in x.iter_mut().enumerate().take(vpb) {
                    let off = L::W * k;
                    *x = if Q4 {
                        L::load_nib(blk.add(2 + off % 16), L::W, off >= 16)
                    } else {
                        L::load_i8(blk.add(2 + off), L::W)
                    };
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let cv = L::splat(*a.add(i * lda + j) * dsc);
                    for (acc, x) in acc[b * vpb..].iter_mut().zip(&x[..vpb]) {
                        *acc = L::fma(cv, *x, *acc);
                    }
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            let o = out.add(i * w + g0 * 32);
            for (k, acc) in acc.iter().enumerate().take(nv) {
                L::store(o.add(L::W * k), *acc, L::W);
            }
        }
    }
}

/// The quantized weighted values of `M` probability rows over the whole
/// blocks of `w`, `nb` blocks a pass (1 or 2); returns where the computed
/// outputs end (`w` rounded down to 32).
///
/// # Safety
/// As [`q_weighted_k`] for every pass.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q_weighted_m<L: Lanes, const M: usize, const Q4: bool>(
    a: *const f32,
    lda: usize,
    len: usize,
    v: *const u8,
    out: *mut f32,
    w: usize,
    nb: usize,
) -> usize {
    let full = w / 32;
    let rb = w.div_ceil(32) * if Q4 { 18 } else { 34 };
    let mut g = 0;
    // SAFETY: each pass covers blocks g .. g + NB <= full.
    unsafe {
        while g + 2 <= full && nb >= 2 {
            q_weighted_k::<L, M, 2, Q4>(a, lda, len, v, rb, g, out, w);
            g += 2;
        }
        while g < full {
            q_weighted_k::<L, M, 1, Q4>(a, lda, len, v, rb, g, out, w);
            g += 1;
        }
    }
    full * 32
}

/// The quantized weighted values (`kvq::weighted_group`) of every
/// probability row, up to `L::q_rows()` at a time; returns where the
/// computed outputs end (the rest is the caller's, on the reference).
///
/// # Safety
/// The ISA of `L` is available; the bounds `kvq::weighted_group_on` checks hold.
#[inline(always)]
pub(super) unsafe fn q_weighted<L: Lanes>(
    t: super::kvq::KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
) -> usize {
    let rows = out.len() / w;
    let q4 = t == super::kvq::KvQuant::Q4_0;
    let (max_rows, nb) = L::q_weighted_shape();
    let mut done = w / 32 * 32;
    // SAFETY: rows i0 .. i0 + k of a and out (checked by the caller).
    unsafe {
        let mut i0 = 0;
        while i0 < rows {
            let (ap, op) = (a.as_ptr().add(i0 * lda), out.as_mut_ptr().add(i0 * w));
            let vp = v.as_ptr();
            macro_rules! go {
                ($m:literal) => {
                    if q4 {
                        q_weighted_m::<L, $m, true>(ap, lda, len, vp, op, w, nb)
                    } else {
                        q_weighted_m::<L, $m, false>(ap, lda, len, vp, op, w, nb)
                    }
                };
            }
            let k = (rows - i0).min(max_rows);
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
