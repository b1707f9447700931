//! f32 helpers of attention (query-key scores over a transposed key cache,
//! the probability-weighted sum of value rows) with run-time ISA dispatch.
//!
//! Every element is computed with the same IEEE operations in the same order
//! as the scalar reference (one fused multiply-add per term, terms in index
//! order), so the AVX-512 and AVX2 paths (`attn/avx2.rs`) equal the scalar
//! one bit for bit: the vectors only run many independent elements side by
//! side. One fused multiply-add per term, not a rounded product and a
//! rounded add: on Zen 4 the adds and the f16 widening share two pipes, and
//! the fused form is the faster one. The path is the integer kernels'
//! ([`Isa::best`]); the `_on` variants take one explicitly (the tests run
//! every path).
//!
//! These helpers replace the runtime's safe-Rust versions (SSE2, 16
//! positions per block), which were a large share of a prefill's samples
//! (figures: docs/perf-history/kernels.md, docs/perf-history/runtime.md).

use super::Isa;
use std::sync::OnceLock;

/// The path of the scores and weighted rows: the kernels' ([`Isa::best`],
/// so `GPACK_ISA` picks it as for the integer kernels).
fn path() -> Isa {
    Isa::best()
}

/// Whether the AVX-512F paths run (detected once; `GPACK_ISA` below
/// `avx512vnni` turns them off, as for the integer kernels).
fn use_avx512() -> bool {
    static USE: OnceLock<bool> = OnceLock::new();
    *USE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            super::Isa::best() == super::Isa::Avx512Vnni && is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

fn check_scores<T>(q: &[f32], kt: &[T], stride: usize, start: usize, n: usize) {
    if n > 0 && !q.is_empty() {
        let need = (q.len() - 1) * stride + start + n;
        assert!(need <= kt.len(), "scores_transposed: key cache too short");
    }
}

fn check_rows<T>(a: &[f32], v: &[T], stride: usize, w: usize) {
    if w > 0 && !a.is_empty() {
        let need = (a.len() - 1) * stride + w;
        assert!(need <= v.len(), "weighted_rows: value rows too short");
    }
}

/// The bounds of the grouped helpers: `rows` coefficient rows of `len`
/// (`cs` apart) against `len` rows of `m` (`stride` apart, `w` wide from
/// `start`), outputs `w` wide `os` apart.
#[allow(clippy::too_many_arguments)]
fn check_group<T>(
    what: &str,
    c: &[f32],
    cs: usize,
    len: usize,
    rows: usize,
    m: &[T],
    stride: usize,
    start: usize,
    w: usize,
    out: usize,
    os: usize,
) {
    if rows == 0 {
        return;
    }
    let fits = |n: Option<usize>, have: usize| n.is_some_and(|n| n <= have);
    let last = |k: usize, step: usize, tail: usize| {
        (k - 1).checked_mul(step).and_then(|x| x.checked_add(tail))
    };
    assert!(
        fits(last(rows, cs, len), c.len()),
        "{what}: coefficient rows too short"
    );
    assert!(fits(last(rows, os, w), out), "{what}: output too short");
    if len > 0 && w > 0 {
        let need = last(len, stride, w).and_then(|x| x.checked_add(start));
        assert!(fits(need, m.len()), "{what}: cache rows too short");
    }
}

/// The shape and bounds of [`scores_transposed_group`] (what its `_on` and
/// `_ref` variants both check).
#[allow(clippy::too_many_arguments)]
fn check_scores_group<T>(
    q: &[f32],
    d: usize,
    kt: &[T],
    stride: usize,
    start: usize,
    n: usize,
    sc: usize,
    ld: usize,
) {
    let what = "scores_transposed_group";
    assert!(
        d > 0 && q.len().is_multiple_of(d),
        "{what}: q is not rows of d"
    );
    check_group(what, q, d, d, q.len() / d, kt, stride, start, n, sc, ld);
}

/// The shape and bounds of [`weighted_rows_group`] (what its `_on` and
/// `_ref` variants both check).
fn check_weighted_group<T>(
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[T],
    stride: usize,
    out: usize,
    w: usize,
) {
    let what = "weighted_rows_group";
    assert!(
        w > 0 && out.is_multiple_of(w),
        "{what}: out is not rows of w"
    );
    check_group(what, a, lda, len, out / w, v, stride, 0, w, out, w);
}

/// An element of a K/V cache: `f32`, or the bits of an IEEE half float
/// (`u16`, an f16 cache). Every kernel widens it to f32 exactly and then
/// runs the same operations in the same order, so an f16 cache's results
/// equal the f32 kernels' on the widened values bit for bit.
pub trait KvElem: sealed::Sealed {
    /// The value as f32 (exact).
    fn widen(self) -> f32;
}

impl KvElem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl KvElem for u16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }
}

mod sealed {
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{__m256, __m512, __mmask16};

    /// What the SIMD paths need of a [`super::KvElem`]; not implementable
    /// outside this module.
    pub trait Sealed: Copy {
        /// 16 lanes from `p` widened to f32 (lanes outside `msk` zero, not read).
        ///
        /// # Safety
        /// AVX-512F/BW/VL; the lanes in `msk` are readable.
        #[cfg(target_arch = "x86_64")]
        unsafe fn load16(p: *const Self, msk: __mmask16) -> __m512;

        /// 8 lanes from `p` widened to f32.
        ///
        /// # Safety
        /// AVX and F16C; 8 elements readable at `p`.
        #[cfg(target_arch = "x86_64")]
        unsafe fn load8(p: *const Self) -> __m256;
    }
}

#[cfg(target_arch = "x86_64")]
mod loads {
    use std::arch::x86_64::*;

    impl super::sealed::Sealed for f32 {
        #[inline(always)]
        unsafe fn load16(p: *const f32, msk: __mmask16) -> __m512 {
            // SAFETY: the caller's bounds; a full mask is a plain load.
            unsafe {
                if msk == 0xFFFF {
                    _mm512_loadu_ps(p)
                } else {
                    _mm512_maskz_loadu_ps(msk, p)
                }
            }
        }

        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            // SAFETY: the caller's bounds.
            unsafe { _mm256_loadu_ps(p) }
        }
    }

    impl super::sealed::Sealed for u16 {
        #[inline(always)]
        unsafe fn load16(p: *const u16, msk: __mmask16) -> __m512 {
            // SAFETY: the caller's bounds; only the lanes in `msk` are read
            // (masked 16-bit load), f16 → f32 is exact.
            unsafe {
                let h = if msk == 0xFFFF {
                    _mm256_loadu_si256(p as *const __m256i)
                } else {
                    _mm256_maskz_loadu_epi16(msk, p as *const i16)
                };
                _mm512_cvtph_ps(h)
            }
        }

        #[inline(always)]
        unsafe fn load8(p: *const u16) -> __m256 {
            // SAFETY: the caller's bounds (16 bytes); f16 → f32 is exact.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod kvq;

/// `sc[j] = (Σ_d q[d] · kt[d · stride + start + j]) · scale` for
/// `j < sc.len()`, the sum taken in `d` order from 0 (each term one fused
/// multiply-add): query-key scores against a transposed key
/// cache (`kt` is `[q.len()][stride]`).
///
/// # Panics
/// If `kt` is too short (`(q.len() - 1) · stride + start + sc.len()`).
pub fn scores_transposed<E: KvElem>(
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    scores_transposed_on(path(), q, scale, kt, stride, start, sc)
}

/// [`scores_transposed`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`scores_transposed`], and if `isa` is not available.
pub fn scores_transposed_on<E: KvElem>(
    isa: Isa,
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    check_scores(q, kt, stride, start, sc.len());
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe { avx512::scores_transposed(q, scale, kt, stride, start, sc) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            avx2::scores_transposed(q, scale, kt, stride, start, sc)
        },
        _ => scores_transposed_ref(q, scale, kt, stride, start, sc),
    }
}

/// The scalar reference of [`scores_transposed`].
///
/// # Panics
/// As [`scores_transposed`].
pub fn scores_transposed_ref<E: KvElem>(
    q: &[f32],
    scale: f32,
    kt: &[E],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    check_scores(q, kt, stride, start, sc.len());
    const B: usize = 16;
    let n = sc.len();
    let full = n / B * B;
    for (bi, blk) in sc[..full].chunks_exact_mut(B).enumerate() {
        let j0 = start + bi * B;
        let mut acc = [0f32; B];
        for (dd, &qv) in q.iter().enumerate() {
            let o = dd * stride + j0;
            let row: &[E; B] = kt[o..o + B].try_into().expect("block");
            for i in 0..B {
                acc[i] = qv.mul_add(row[i].widen(), acc[i]);
            }
        }
        for (b, a) in blk.iter_mut().zip(acc) {
            *b = a * scale;
        }
    }
    if full < n {
        let tail = &mut sc[full..];
        tail.iter_mut().for_each(|v| *v = 0.0);
        for (dd, &qv) in q.iter().enumerate() {
            let o = dd * stride + start + full;
            for (t, &k) in tail.iter_mut().zip(&kt[o..o + n - full]) {
                *t = qv.mul_add(k.widen(), *t);
            }
        }
        tail.iter_mut().for_each(|v| *v *= scale);
    }
}

/// `out[i] = Σ_j a[j] · v[j · stride + i]` for `i < out.len()`, the sum
/// taken in `j` order from 0 (one fused multiply-add per term): the
/// attention-weighted sum of value rows.
///
/// # Panics
/// If `v` is too short (`(a.len() - 1) · stride + out.len()`).
pub fn weighted_rows<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    weighted_rows_on(path(), a, v, stride, out)
}

/// [`weighted_rows`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`weighted_rows`], and if `isa` is not available.
pub fn weighted_rows_on<E: KvElem>(isa: Isa, a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    check_rows(a, v, stride, out.len());
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe { avx512::weighted_rows(a, v, stride, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::weighted_rows(a, v, stride, out) },
        _ => weighted_rows_ref(a, v, stride, out),
    }
}

/// The scalar reference of [`weighted_rows`].
///
/// # Panics
/// As [`weighted_rows`].
pub fn weighted_rows_ref<E: KvElem>(a: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    check_rows(a, v, stride, out.len());
    const B: usize = 16;
    let w = out.len();
    let full = w / B * B;
    for (bi, blk) in out[..full].chunks_exact_mut(B).enumerate() {
        let d0 = bi * B;
        let mut acc = [0f32; B];
        for (j, &aj) in a.iter().enumerate() {
            let o = j * stride + d0;
            let row: &[E; B] = v[o..o + B].try_into().expect("block");
            for i in 0..B {
                acc[i] = aj.mul_add(row[i].widen(), acc[i]);
            }
        }
        blk.copy_from_slice(&acc);
    }
    if full < w {
        let tail = &mut out[full..];
        tail.iter_mut().for_each(|x| *x = 0.0);
        for (j, &aj) in a.iter().enumerate() {
            let o = j * stride + full;
            for (t, &x) in tail.iter_mut().zip(&v[o..o + w - full]) {
                *t = aj.mul_add(x.widen(), *t);
            }
        }
    }
}

/// [`scores_transposed`] for several queries against the same keys (the
/// query heads that share a KV head): query `i` is `q[i·d .. (i+1)·d]`, its
/// `n` scores go to `sc[i·ld ..][..n]`, each with the bits
/// [`scores_transposed`] gives it alone; the keys are read (and widened)
/// once for up to 4 queries.
///
/// # Panics
/// If `d` is 0 or does not divide `q.len()`, or a slice is too short.
#[allow(clippy::too_many_arguments)]
pub fn scores_transposed_group<E: KvElem>(
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
    scores_transposed_group_on(path(), q, d, scale, kt, stride, start, n, sc, ld)
}

/// [`scores_transposed_group`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`scores_transposed_group`], and if `isa` is not available.
#[allow(clippy::too_many_arguments)]
pub fn scores_transposed_group_on<E: KvElem>(
    isa: Isa,
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
    check_scores_group(q, d, kt, stride, start, n, sc.len(), ld);
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe {
            avx512::scores_group(q, d, scale, kt, stride, start, n, sc, ld)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            avx2::scores_group(q, d, scale, kt, stride, start, n, sc, ld)
        },
        _ => scores_transposed_group_ref(q, d, scale, kt, stride, start, n, sc, ld),
    }
}

/// The scalar reference of [`scores_transposed_group`]: [`scores_transposed_ref`]
/// per query.
///
/// # Panics
/// As [`scores_transposed_group`].
#[allow(clippy::too_many_arguments)]
pub fn scores_transposed_group_ref<E: KvElem>(
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
    check_scores_group(q, d, kt, stride, start, n, sc.len(), ld);
    for (i, q) in q.chunks_exact(d).enumerate() {
        scores_transposed_ref(q, scale, kt, stride, start, &mut sc[i * ld..i * ld + n]);
    }
}

/// [`weighted_rows`] for several probability rows over the same value rows
/// (the query heads that share a KV head): row `i` is `a[i·lda ..][..len]`,
/// its `w` outputs go to `out[i·w .. (i+1)·w]` (`out.len() / w` rows), each
/// with the bits [`weighted_rows`] gives it alone; the values are read (and
/// widened) once for up to 4 rows.
///
/// # Panics
/// If `w` is 0 or does not divide `out.len()`, or a slice is too short.
pub fn weighted_rows_group<E: KvElem>(
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[E],
    stride: usize,
    out: &mut [f32],
    w: usize,
) {
    weighted_rows_group_on(path(), a, lda, len, v, stride, out, w)
}

/// [`weighted_rows_group`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`weighted_rows_group`], and if `isa` is not available.
#[allow(clippy::too_many_arguments)]
pub fn weighted_rows_group_on<E: KvElem>(
    isa: Isa,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[E],
    stride: usize,
    out: &mut [f32],
    w: usize,
) {
    check_weighted_group(a, lda, len, v, stride, out.len(), w);
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe { avx512::weighted_group(a, lda, len, v, stride, out, w) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::weighted_group(a, lda, len, v, stride, out, w) },
        _ => weighted_rows_group_ref(a, lda, len, v, stride, out, w),
    }
}

/// The scalar reference of [`weighted_rows_group`]: [`weighted_rows_ref`]
/// per row.
///
/// # Panics
/// As [`weighted_rows_group`].
pub fn weighted_rows_group_ref<E: KvElem>(
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[E],
    stride: usize,
    out: &mut [f32],
    w: usize,
) {
    check_weighted_group(a, lda, len, v, stride, out.len(), w);
    for (i, o) in out.chunks_exact_mut(w).enumerate() {
        weighted_rows_ref(&a[i * lda..i * lda + len], v, stride, o);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod lanes;

/// glibc's `expf` (the FMA variant, `__expf_fma`, from ARM's optimized
/// routines) in portable Rust: the same table, constants and operation order
/// (fused multiply-adds where that build fuses), so it returns the same bits
/// as `f32::exp` on glibc x86-64 machines with FMA, and the same bits on every
/// machine. Inputs with |x| ≥ 88 (and NaN) go to `f32::exp`.
pub fn expf(x: f32) -> f32 {
    expf_impl(x)
}

/// [`expf`], always inlined: inside `#[target_feature(enable = "fma")]`
/// functions its `mul_add`s become FMA instructions (elsewhere they may be
/// calls to the C library's `fma`).
#[inline(always)]
fn expf_impl(x: f32) -> f32 {
    let top = (x.to_bits() >> 20) & 0x7ff;
    if top > 0x42a {
        return x.exp();
    }
    let xd = x as f64;
    let kd_s = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = kd_s.to_bits();
    let kd = kd_s - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    let t = EXP2F_TAB[(ki & 31) as usize].wrapping_add(ki << 47);
    let s = f64::from_bits(t);
    let z = r.mul_add(C0, C1);
    let r2 = r * r;
    let y = r.mul_add(C2, 1.0);
    let y = z.mul_add(r2, y);
    (y * s) as f32
}

/// `2^(i/32)` bit patterns minus `i << 47` (glibc `__exp2f_data.tab`).
const EXP2F_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// `32 / ln 2`.
const INV_LN2_N: f64 = f64::from_bits(0x40471547652b82fe);
/// `0x1.8p52`: adding it rounds to an integer in the low mantissa bits.
const SHIFT: f64 = f64::from_bits(0x4338000000000000);
const C0: f64 = f64::from_bits(0x3ebc6af84b912394);
const C1: f64 = f64::from_bits(0x3f2ebfce50fac4f3);
const C2: f64 = f64::from_bits(0x3f962e42ff0c52d6);

/// In-place softmax: `m = max x` (NaN ignored), `x[i] = expf(x[i] - m)`,
/// `s = Σ x[i]` in index order, `x[i] *= 1 / s` — with [`expf`], 16 lanes at
/// a time on AVX-512, 8 on AVX2 (bit-identical: the same operations per element; the
/// sum stays sequential).
pub fn softmax(x: &mut [f32]) {
    let len = x.len();
    softmax_rows(x, len.max(1), len, 1);
}

/// [`softmax`] of `rows` rows `x[r·ld ..][..len]` (the scores of the query
/// heads that share a KV head), each with [`softmax`]'s bits; the rows'
/// sums (sequential, each in index order) run side by side, so their
/// add latencies overlap.
///
/// # Panics
/// If `x` is too short or `rows > 0` and `ld < len`.
pub fn softmax_rows(x: &mut [f32], ld: usize, len: usize, rows: usize) {
    if rows == 0 {
        return;
    }
    assert!(ld >= len, "softmax_rows: ld {ld} < len {len}");
    let need = (rows - 1).checked_mul(ld).and_then(|v| v.checked_add(len));
    assert!(
        need.is_some_and(|n| n <= x.len()),
        "softmax_rows: x too short"
    );
    for r in 0..rows {
        exp_sub_max(&mut x[r * ld..r * ld + len]);
    }
    // Up to 8 rows' sums at once (8, 4, 2 or 1), each in index order.
    let mut r0 = 0;
    while r0 < rows {
        let mut sum = [0f32; 8];
        let k = match rows - r0 {
            8.. => row_sums::<8>(x, ld, len, r0, &mut sum),
            4.. => row_sums::<4>(x, ld, len, r0, &mut sum),
            2.. => row_sums::<2>(x, ld, len, r0, &mut sum),
            _ => row_sums::<1>(x, ld, len, r0, &mut sum),
        };
        for (j, s) in sum.iter().enumerate().take(k) {
            let inv = 1.0 / s;
            let row = &mut x[(r0 + j) * ld..(r0 + j) * ld + len];
            row.iter_mut().for_each(|v| *v *= inv);
        }
        r0 += k;
    }
}

/// The sums of rows `r0 .. r0 + K` of `x` (`x[r·ld ..][..len]`) into
/// `sum[..K]`, each in index order, side by side (their add latencies
/// overlap). The rows are sliced to `len` first and `K` is a constant, so
/// the loop has no bounds checks: with them and a run-time row count it was
/// most of `softmax_rows`' time in a 2048-token prefill. Returns `K`.
fn row_sums<const K: usize>(x: &[f32], ld: usize, len: usize, r0: usize, sum: &mut [f32]) -> usize {
    let rows: [&[f32]; K] = std::array::from_fn(|j| &x[(r0 + j) * ld..][..len]);
    let mut s = [0f32; K];
    for i in 0..len {
        for (s, r) in s.iter_mut().zip(&rows) {
            *s += r[i];
        }
    }
    sum[..K].copy_from_slice(&s);
    K
}

/// [`softmax_rows`] with one more logit per row that takes weight but has
/// no value (an attention sink: gpt-oss, transformers' `eager_attention_forward`
/// with `sinks`): row `r` is `expf(x - m) / (Σ expf(x - m) + expf(sinks[r] - m))`,
/// `m` the larger of the row's maximum and its sink.
///
/// # Panics
/// As [`softmax_rows`], or if `sinks` has fewer than `rows` values.
pub fn softmax_rows_sinks(x: &mut [f32], ld: usize, len: usize, rows: usize, sinks: &[f32]) {
    if rows == 0 {
        return;
    }
    assert!(ld >= len, "softmax_rows_sinks: ld {ld} < len {len}");
    assert!(sinks.len() >= rows, "softmax_rows_sinks: too few sinks");
    let need = (rows - 1).checked_mul(ld).and_then(|v| v.checked_add(len));
    assert!(
        need.is_some_and(|n| n <= x.len()),
        "softmax_rows_sinks: x too short"
    );
    for (r, &sink) in sinks.iter().enumerate().take(rows) {
        let row = &mut x[r * ld..r * ld + len];
        let max = max_of(row, sink);
        exp_sub(row, max);
        let sum = row.iter().sum::<f32>() + expf(sink - max);
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// `x[i] = expf(x[i] - max x)` (NaN ignored in the max) on the best path.
fn exp_sub_max(x: &mut [f32]) {
    exp_sub(x, max_of(x, f32::NEG_INFINITY));
}

/// The largest of `from` and the non-NaN values of `x`: the value of
/// `x.iter().fold(from, f32::max)` (up to the sign of a zero maximum, which
/// no `v - max` can tell apart), in 16 independent lanes that the compiler
/// vectorizes. The fold is one dependent `max` per element: it was half of
/// `softmax_rows`' time in a 2048-token prefill.
fn max_of(x: &[f32], from: f32) -> f32 {
    let mut m = [from; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (m, &v) in m.iter_mut().zip(c) {
            // False for NaN: NaN is skipped, as f32::max skips it.
            if v > *m {
                *m = v;
            }
        }
    }
    let tail = chunks.remainder().iter().copied().fold(from, f32::max);
    m.iter().copied().fold(tail, f32::max)
}

/// `x[i] = expf(x[i] - max)` on the best path.
fn exp_sub(x: &mut [f32], max: f32) {
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512F (and FMA, implied by the AVX-512 VNNI path) detected.
        unsafe { avx512::exp_sub(x, max) };
    } else if use_avx2() {
        // SAFETY: AVX2 and FMA detected.
        unsafe { avx2::exp_sub(x, max) };
    } else if use_fma() {
        // SAFETY: FMA detected.
        unsafe { exp_sub_fma(x, max) };
    } else {
        x.iter_mut().for_each(|v| *v = expf(*v - max));
    }
    #[cfg(not(target_arch = "x86_64"))]
    x.iter_mut().for_each(|v| *v = expf(*v - max));
}

/// `x[i] = expf(x[i])` for all `i` with [`expf`] (glibc's bits), 16 lanes at
/// a time on AVX-512 (bit-identical: the same operations per element). For
/// activations (SiLU's `exp(-x)`) whose libm calls were ~2 % of a batched
/// decode step.
pub fn exp_inplace(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512F (and FMA, implied by the AVX-512 VNNI path)
        // detected. `v - 0.0 == v` for every f32 (also -0.0 and NaN), so
        // this is expf(v).
        unsafe { avx512::exp_sub(x, 0.0) };
        return;
    } else if use_avx2() {
        // SAFETY: AVX2 and FMA detected; `v - 0.0 == v` as above.
        unsafe { avx2::exp_sub(x, 0.0) };
        return;
    } else if use_fma() {
        // SAFETY: FMA detected.
        unsafe { exp_sub_fma(x, 0.0) };
        return;
    }
    x.iter_mut().for_each(|v| *v = expf(*v));
}

/// Whether the AVX2 exp path runs: the kernels' path is AVX2 or better
/// (`GPACK_ISA=scalar` turns it off) and the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
fn use_avx2() -> bool {
    static USE: OnceLock<bool> = OnceLock::new();
    *USE.get_or_init(|| {
        path() != Isa::Scalar && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    })
}

/// Whether the CPU has FMA (detected once).
#[cfg(target_arch = "x86_64")]
fn use_fma() -> bool {
    static USE: OnceLock<bool> = OnceLock::new();
    *USE.get_or_init(|| is_x86_feature_detected!("fma"))
}

/// `x[i] = expf(x[i] - max)` with hardware FMA for the `mul_add`s.
///
/// # Safety
/// FMA must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn exp_sub_fma(x: &mut [f32], max: f32) {
    x.iter_mut().for_each(|v| *v = expf_impl(*v - max));
}

/// The scalar reference of [`softmax`].
pub fn softmax_ref(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = expf(*v - max);
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(target_arch = "x86_64")]
mod avx512_exp {
    use super::{C0, C1, C2, EXP2F_TAB, INV_LN2_N, SHIFT};
    use std::arch::x86_64::*;

    /// [`super::expf`] of 8 lanes (f64 inside); every lane must have
    /// |x| < 88 (not NaN).
    ///
    /// # Safety
    /// AVX-512F + FMA.
    #[inline(always)]
    pub(super) unsafe fn exp8(x: __m256) -> __m256 {
        // SAFETY: register-only ops; the table is a local array.
        unsafe {
            let tab = EXP2F_TAB.as_ptr() as *const f64;
            let t0 = _mm512_loadu_pd(tab);
            let t1 = _mm512_loadu_pd(tab.add(8));
            let t2 = _mm512_loadu_pd(tab.add(16));
            let t3 = _mm512_loadu_pd(tab.add(24));
            let xd = _mm512_cvtps_pd(x);
            let inv = _mm512_set1_pd(INV_LN2_N);
            let shift = _mm512_set1_pd(SHIFT);
            let kd_s = _mm512_fmadd_pd(inv, xd, shift);
            let ki = _mm512_castpd_si512(kd_s);
            let kd = _mm512_sub_pd(kd_s, shift);
            let r = _mm512_fmsub_pd(inv, xd, kd);
            let lo = _mm512_permutex2var_pd(t0, ki, t1);
            let hi = _mm512_permutex2var_pd(t2, ki, t3);
            let use_hi = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
            let tv = _mm512_mask_blend_pd(use_hi, lo, hi);
            let t = _mm512_add_epi64(_mm512_castpd_si512(tv), _mm512_slli_epi64(ki, 47));
            let s = _mm512_castsi512_pd(t);
            let z = _mm512_fmadd_pd(r, _mm512_set1_pd(C0), _mm512_set1_pd(C1));
            let r2 = _mm512_mul_pd(r, r);
            let y = _mm512_fmadd_pd(r, _mm512_set1_pd(C2), _mm512_set1_pd(1.0));
            let y = _mm512_fmadd_pd(z, r2, y);
            _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
        }
    }
}
