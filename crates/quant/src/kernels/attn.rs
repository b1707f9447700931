//! f32 helpers of attention (query-key scores over a transposed key cache,
//! the probability-weighted sum of value rows) with run-time ISA dispatch.
//!
//! Every element is computed with the same IEEE operations in the same order
//! as the scalar reference (a separate multiply and add per term, terms in
//! index order, no FMA), so the AVX-512 path equals the scalar one bit for
//! bit: the vectors only run many independent elements side by side.
//!
//! Perf log (SmolLM2-135M Q8_0, 512-token prefill, 2 threads): the safe-Rust
//! versions (SSE2, 16 positions per block) took ~21 % of the prefill's
//! samples; see docs/PERFORMANCE.md ("Runtime") for the gain.

use std::sync::OnceLock;

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

fn check_scores(q: &[f32], kt: &[f32], stride: usize, start: usize, n: usize) {
    if n > 0 && !q.is_empty() {
        let need = (q.len() - 1) * stride + start + n;
        assert!(need <= kt.len(), "scores_transposed: key cache too short");
    }
}

fn check_rows(a: &[f32], v: &[f32], stride: usize, w: usize) {
    if w > 0 && !a.is_empty() {
        let need = (a.len() - 1) * stride + w;
        assert!(need <= v.len(), "weighted_rows: value rows too short");
    }
}

/// `sc[j] = (Σ_d q[d] · kt[d · stride + start + j]) · scale` for
/// `j < sc.len()`, the sum taken in `d` order from 0 (each term a rounded
/// product, then a rounded add): query-key scores against a transposed key
/// cache (`kt` is `[q.len()][stride]`).
///
/// # Panics
/// If `kt` is too short (`(q.len() - 1) · stride + start + sc.len()`).
pub fn scores_transposed(
    q: &[f32],
    scale: f32,
    kt: &[f32],
    stride: usize,
    start: usize,
    sc: &mut [f32],
) {
    check_scores(q, kt, stride, start, sc.len());
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512F detected (`use_avx512`); bounds checked above.
        unsafe { avx512::scores_transposed(q, scale, kt, stride, start, sc) };
        return;
    }
    scores_transposed_ref(q, scale, kt, stride, start, sc)
}

/// The scalar reference of [`scores_transposed`].
///
/// # Panics
/// As [`scores_transposed`].
pub fn scores_transposed_ref(
    q: &[f32],
    scale: f32,
    kt: &[f32],
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
            let row: &[f32; B] = kt[o..o + B].try_into().expect("block");
            for i in 0..B {
                acc[i] += qv * row[i];
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
                *t += qv * k;
            }
        }
        tail.iter_mut().for_each(|v| *v *= scale);
    }
}

/// `out[i] = Σ_j a[j] · v[j · stride + i]` for `i < out.len()`, the sum
/// taken in `j` order from 0 (rounded product, then rounded add): the
/// attention-weighted sum of value rows.
///
/// # Panics
/// If `v` is too short (`(a.len() - 1) · stride + out.len()`).
pub fn weighted_rows(a: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    check_rows(a, v, stride, out.len());
    #[cfg(target_arch = "x86_64")]
    if use_avx512() {
        // SAFETY: AVX-512F detected; bounds checked above.
        unsafe { avx512::weighted_rows(a, v, stride, out) };
        return;
    }
    weighted_rows_ref(a, v, stride, out)
}

/// The scalar reference of [`weighted_rows`].
///
/// # Panics
/// As [`weighted_rows`].
pub fn weighted_rows_ref(a: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    check_rows(a, v, stride, out.len());
    const B: usize = 16;
    let w = out.len();
    let full = w / B * B;
    for (bi, blk) in out[..full].chunks_exact_mut(B).enumerate() {
        let d0 = bi * B;
        let mut acc = [0f32; B];
        for (j, &aj) in a.iter().enumerate() {
            let o = j * stride + d0;
            let row: &[f32; B] = v[o..o + B].try_into().expect("block");
            for i in 0..B {
                acc[i] += aj * row[i];
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
                *t += aj * x;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Lanes `0..k` set (k ≤ 16).
    #[inline(always)]
    fn mask(k: usize) -> __mmask16 {
        ((1u32 << k) - 1) as __mmask16
    }

    /// `K` vectors of 16 positions (the last one masked to `m`) from
    /// position `j`, summed over the head dimension.
    ///
    /// # Safety
    /// AVX-512F; every `kt[d · stride + j + i]` read (`i` < 16(K-1) + popcount(m))
    /// is in bounds; `sc[j..j + 16(K-1) + popcount(m)]` is in bounds.
    #[inline(always)]
    unsafe fn scores_k<const K: usize>(
        q: &[f32],
        scale: __m512,
        kt: *const f32,
        stride: usize,
        j: usize,
        sc: *mut f32,
        m: __mmask16,
    ) {
        // SAFETY: the caller guarantees the bounds; the last vector is masked.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); K];
            for (dd, &qv) in q.iter().enumerate() {
                let qv = _mm512_set1_ps(qv);
                let p = kt.add(dd * stride + j);
                for (k, a) in acc.iter_mut().enumerate() {
                    let row = if k + 1 == K {
                        _mm512_maskz_loadu_ps(m, p.add(16 * k))
                    } else {
                        _mm512_loadu_ps(p.add(16 * k))
                    };
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(qv, row));
                }
            }
            for (k, a) in acc.iter().enumerate() {
                let r = _mm512_mul_ps(*a, scale);
                if k + 1 == K {
                    _mm512_mask_storeu_ps(sc.add(j + 16 * k), m, r);
                } else {
                    _mm512_storeu_ps(sc.add(j + 16 * k), r);
                }
            }
        }
    }

    /// # Safety
    /// AVX-512F; the bounds of `super::check_scores` hold.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scores_transposed(
        q: &[f32],
        scale: f32,
        kt: &[f32],
        stride: usize,
        start: usize,
        sc: &mut [f32],
    ) {
        let n = sc.len();
        let s = _mm512_set1_ps(scale);
        // SAFETY: kt[d·stride + start + j] for j < n is in bounds (checked by
        // the caller), as is sc[..n]; all reads and writes stay below n.
        unsafe {
            let kt = kt.as_ptr().add(start);
            let out = sc.as_mut_ptr();
            let mut j = 0;
            while j + 128 <= n {
                scores_k::<8>(q, s, kt, stride, j, out, 0xFFFF);
                j += 128;
            }
            while j + 64 <= n {
                scores_k::<4>(q, s, kt, stride, j, out, 0xFFFF);
                j += 64;
            }
            let r = n - j;
            match r.div_ceil(16) {
                0 => {}
                1 => scores_k::<1>(q, s, kt, stride, j, out, mask(r)),
                2 => scores_k::<2>(q, s, kt, stride, j, out, mask(r - 16)),
                3 => scores_k::<3>(q, s, kt, stride, j, out, mask(r - 32)),
                _ => scores_k::<4>(q, s, kt, stride, j, out, mask(r - 48)),
            }
        }
    }

    /// `K` vectors of 16 output dims from dim `i` (the last masked to `m`).
    ///
    /// # Safety
    /// AVX-512F; reads `v[j · stride + i + ..]` and writes `out[i + ..]`
    /// within bounds.
    #[inline(always)]
    unsafe fn rows_k<const K: usize>(
        a: &[f32],
        v: *const f32,
        stride: usize,
        i: usize,
        out: *mut f32,
        m: __mmask16,
    ) {
        // SAFETY: the caller guarantees the bounds; the last vector is masked.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); K];
            for (j, &aj) in a.iter().enumerate() {
                let av = _mm512_set1_ps(aj);
                let p = v.add(j * stride + i);
                for (k, c) in acc.iter_mut().enumerate() {
                    let row = if k + 1 == K {
                        _mm512_maskz_loadu_ps(m, p.add(16 * k))
                    } else {
                        _mm512_loadu_ps(p.add(16 * k))
                    };
                    *c = _mm512_add_ps(*c, _mm512_mul_ps(av, row));
                }
            }
            for (k, c) in acc.iter().enumerate() {
                if k + 1 == K {
                    _mm512_mask_storeu_ps(out.add(i + 16 * k), m, *c);
                } else {
                    _mm512_storeu_ps(out.add(i + 16 * k), *c);
                }
            }
        }
    }

    /// # Safety
    /// AVX-512F; the bounds of `super::check_rows` hold.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_rows(a: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
        let w = out.len();
        // SAFETY: v[j·stride + i] for i < w is in bounds (checked by the
        // caller), as is out[..w].
        unsafe {
            let (vp, op) = (v.as_ptr(), out.as_mut_ptr());
            let mut i = 0;
            while i + 64 <= w {
                rows_k::<4>(a, vp, stride, i, op, 0xFFFF);
                i += 64;
            }
            let r = w - i;
            match r.div_ceil(16) {
                0 => {}
                1 => rows_k::<1>(a, vp, stride, i, op, mask(r)),
                2 => rows_k::<2>(a, vp, stride, i, op, mask(r - 16)),
                3 => rows_k::<3>(a, vp, stride, i, op, mask(r - 32)),
                _ => rows_k::<4>(a, vp, stride, i, op, mask(r - 48)),
            }
        }
    }
}
