//! Quantized K/V caches (`--kv q8_0|q4_0`): ggml's 32-value blocks along
//! a head's dimensions, one block row per position and head, and the
//! attention sums that read them without dequantizing a copy first.
//!
//! The blocks are ggml's (`quantize_row_q8_0_ref`/`quantize_row_q4_0_ref`,
//! ported in [`crate::quantize`]): q8_0 `{ f16 d = amax/127; i8 q[32] =
//! round(x/d) }`, q4_0 `{ f16 d = max/−8 (max: the value of largest
//! magnitude, with its sign); u8 qs[16] }` with `q = min(15, trunc(x/d +
//! 8.5))`, value j in the low nibble of `qs[j]` and value j+16 in its high
//! nibble. A head whose size is not a multiple of 32 has its last block
//! padded with zeros (which quantize to 0: they add nothing); llama.cpp
//! refuses such heads, gpack's tiny test models have heads of 16.
//!
//! Layouts:
//! - values: by position, one head's row = its `ceil(w / 32)` ggml blocks
//!   ([`row_bytes`]), exactly the bytes ggml stores;
//! - keys, transposed within blocks of `kb` positions as the f16/f32 key
//!   cache is (so a score sums over contiguous positions): per group `g`
//!   of 32 dims, `kb` f16 scales (position order), then the quants as
//!   rows of `kb` positions: q8_0 32 rows of i8 (row i = dim 32g + i),
//!   q4_0 16 rows of bytes (row i = dims 32g + i (low nibble) and 32g +
//!   16 + i (high)). A position's bytes are its ggml block's, scattered.
//!
//! The sums, per element (the SIMD paths in `lanes.rs` run many elements
//! side by side with these operations in this order, so every path gives
//! the scalar reference's bits):
//! - score of position j: `s_g = Σ_dims q[dim] · k_q(dim, j)` (one fused
//!   multiply-add per dim; q4_0 takes row i's low then high nibble), then
//!   `t = fma(s_g, d_g(j), t)` over groups in order, then `t · scale`;
//! - weighted values: `out[t] = Σ_j fma(a[j] · d_{g(t)}(j), v_q(j, t), ·)`
//!   in position order (the coefficient rounded once, then one fused
//!   multiply-add).

use super::Isa;

/// A quantized KV cache type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvQuant {
    /// ggml's q8_0: 34 bytes per 32 values (8.5 bits each).
    Q8_0,
    /// ggml's q4_0: 18 bytes per 32 values (4.5 bits each).
    Q4_0,
}

/// Values per block.
pub const QK: usize = 32;

impl KvQuant {
    /// Bytes of one 32-value block.
    pub const fn block_bytes(self) -> usize {
        match self {
            KvQuant::Q8_0 => 34,
            KvQuant::Q4_0 => 18,
        }
    }
    /// Rows of quant bytes per block (q4_0 packs two dims a byte).
    const fn qrows(self) -> usize {
        match self {
            KvQuant::Q8_0 => 32,
            KvQuant::Q4_0 => 16,
        }
    }
    fn ggml(self) -> crate::GgmlType {
        match self {
            KvQuant::Q8_0 => crate::GgmlType::Q8_0,
            KvQuant::Q4_0 => crate::GgmlType::Q4_0,
        }
    }
}

/// Bytes of one head's row of `w` values (`ceil(w / 32)` blocks).
pub fn row_bytes(t: KvQuant, w: usize) -> usize {
    w.div_ceil(QK) * t.block_bytes()
}

/// Bytes of one head's transposed key block of `kb` positions, `d` dims.
pub fn key_block_bytes(t: KvQuant, d: usize, kb: usize) -> usize {
    d.div_ceil(QK) * t.block_bytes() * kb
}

/// The longest head [`quantize_row`] takes.
pub const MAX_HEAD: usize = 1024;

/// `x` (one head, `x.len() <= MAX_HEAD`) quantized into `out`
/// ([`row_bytes`] long): ggml's blocks, the last one zero-padded.
///
/// # Panics
/// If `x` is longer than [`MAX_HEAD`] or `out` is not [`row_bytes`] long.
pub fn quantize_row(t: KvQuant, x: &[f32], out: &mut [u8]) {
    assert!(
        x.len() <= MAX_HEAD,
        "kv quantize: head of {} > {MAX_HEAD}",
        x.len()
    );
    assert_eq!(out.len(), row_bytes(t, x.len()), "kv quantize: out size");
    let full = x.len().div_ceil(QK) * QK;
    let mut buf = [0f32; MAX_HEAD];
    buf[..x.len()].copy_from_slice(x);
    crate::quantize::quantize_row(t.ggml(), &buf[..full], None, out)
        .expect("q8_0/q4_0 rows of whole blocks");
}

/// Writes a head's keys `x` (`d` dims) at position `j` of a transposed key
/// block `blk` ([`key_block_bytes`] for `kb` positions).
///
/// # Panics
/// If `j >= kb` or the block is the wrong size.
pub fn put_key(t: KvQuant, x: &[f32], blk: &mut [u8], kb: usize, j: usize) {
    let d = x.len();
    assert!(
        j < kb && blk.len() == key_block_bytes(t, d, kb),
        "kv put_key: block shape"
    );
    let mut row = [0u8; MAX_HEAD / QK * 34];
    let row = &mut row[..row_bytes(t, d)];
    quantize_row(t, x, row);
    let bb = t.block_bytes();
    for (g, b) in row.chunks_exact(bb).enumerate() {
        let grp = &mut blk[g * bb * kb..(g + 1) * bb * kb];
        grp[2 * j..2 * j + 2].copy_from_slice(&b[..2]);
        for (i, &q) in b[2..].iter().enumerate() {
            grp[2 * kb + i * kb + j] = q;
        }
    }
}

#[inline(always)]
fn f16_at(p: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([p[at], p[at + 1]])).to_f32()
}

/// The value of quant byte `b` (q4_0: its low or high nibble).
#[inline(always)]
fn qval(t: KvQuant, b: u8, hi: bool) -> f32 {
    match t {
        KvQuant::Q8_0 => b as i8 as f32,
        KvQuant::Q4_0 => (if hi { b >> 4 } else { b & 15 }) as f32 - 8.0,
    }
}

fn check_keys(t: KvQuant, q: &[f32], d: usize, blk: &[u8], kb: usize, start: usize, n: usize) {
    assert!(
        d > 0 && q.len().is_multiple_of(d),
        "kv scores: q is not rows of d"
    );
    assert!(d <= MAX_HEAD, "kv scores: head of {d} > {MAX_HEAD}");
    assert_eq!(
        blk.len(),
        key_block_bytes(t, d, kb),
        "kv scores: key block size"
    );
    assert!(
        start.checked_add(n).is_some_and(|e| e <= kb),
        "kv scores: positions past the block"
    );
}

fn check_out(what: &str, rows: usize, ld: usize, n: usize, have: usize) {
    if rows > 0 {
        let need = (rows - 1).checked_mul(ld).and_then(|x| x.checked_add(n));
        assert!(need.is_some_and(|x| x <= have), "{what}: output too short");
    }
}

/// `sc[i · ld + j] = score(q_i, position start + j) · scale` for the `n`
/// positions from `start` of a transposed key block `blk` (`kb` positions)
/// and each query row `q_i = q[i·d ..][..d]` (the module docs say how the
/// sum runs), on the best path.
///
/// # Panics
/// If a shape or bound does not hold.
#[allow(clippy::too_many_arguments)]
pub fn scores_group(
    t: KvQuant,
    q: &[f32],
    d: usize,
    scale: f32,
    blk: &[u8],
    kb: usize,
    start: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) {
    scores_group_on(Isa::best(), t, q, d, scale, blk, kb, start, n, sc, ld)
}

/// [`scores_group`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`scores_group`], and if `isa` is not available.
#[allow(clippy::too_many_arguments)]
pub fn scores_group_on(
    isa: Isa,
    t: KvQuant,
    q: &[f32],
    d: usize,
    scale: f32,
    blk: &[u8],
    kb: usize,
    start: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) {
    check_keys(t, q, d, blk, kb, start, n);
    check_out("kv scores", q.len() / d, ld, n, sc.len());
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    let done = match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe {
            super::avx512::q_scores(t, q, d, scale, blk, kb, start, n, sc, ld)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            super::avx2::q_scores(t, q, d, scale, blk, kb, start, n, sc, ld)
        },
        _ => 0,
    };
    if done < n {
        scores_part(t, q, d, scale, blk, kb, start, done, n, sc, ld);
    }
}

/// The scalar reference of [`scores_group`].
///
/// # Panics
/// As [`scores_group`].
#[allow(clippy::too_many_arguments)]
pub fn scores_group_ref(
    t: KvQuant,
    q: &[f32],
    d: usize,
    scale: f32,
    blk: &[u8],
    kb: usize,
    start: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) {
    check_keys(t, q, d, blk, kb, start, n);
    check_out("kv scores", q.len() / d, ld, n, sc.len());
    scores_part(t, q, d, scale, blk, kb, start, 0, n, sc, ld);
}

/// The reference's scores of positions `start + j` for `j0 <= j < n`.
#[allow(clippy::too_many_arguments)]
pub(super) fn scores_part(
    t: KvQuant,
    q: &[f32],
    d: usize,
    scale: f32,
    blk: &[u8],
    kb: usize,
    start: usize,
    j0: usize,
    n: usize,
    sc: &mut [f32],
    ld: usize,
) {
    let gb = t.block_bytes() * kb;
    for (i, qi) in q.chunks_exact(d).enumerate() {
        for j in j0..n {
            let p = start + j;
            let mut tot = 0f32;
            for g in 0..d.div_ceil(QK) {
                let grp = &blk[g * gb..(g + 1) * gb];
                let mut s = 0f32;
                for r in 0..t.qrows() {
                    let b = grp[2 * kb + r * kb + p];
                    let dims: &[(usize, bool)] = match t {
                        KvQuant::Q8_0 => &[(r, false)],
                        KvQuant::Q4_0 => &[(r, false), (r + 16, true)],
                    };
                    for &(o, hi) in dims {
                        let dim = g * QK + o;
                        if dim < d {
                            s = qi[dim].mul_add(qval(t, b, hi), s);
                        }
                    }
                }
                tot = s.mul_add(f16_at(grp, 2 * p), tot);
            }
            sc[i * ld + j] = tot * scale;
        }
    }
}

fn check_values(t: KvQuant, a: &[f32], lda: usize, len: usize, v: &[u8], w: usize, out: usize) {
    assert!(
        w > 0 && out.is_multiple_of(w),
        "kv weighted: out is not rows of w"
    );
    check_out("kv weighted (probabilities)", out / w, lda, len, a.len());
    let need = len.checked_mul(row_bytes(t, w));
    assert!(
        need.is_some_and(|x| x <= v.len()),
        "kv weighted: value rows too short"
    );
}

/// `out[i · w + x] = Σ_j a[i · lda + j] · v_j[x]` over the `len` value rows
/// `v_j` (each [`row_bytes`]`(t, w)` long, from `v[0]`), for the
/// `out.len() / w` probability rows (the module docs say how the sum runs),
/// on the best path.
///
/// # Panics
/// If a shape or bound does not hold.
pub fn weighted_group(
    t: KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
) {
    weighted_group_on(Isa::best(), t, a, lda, len, v, out, w)
}

/// [`weighted_group`] on `isa`'s path (the same bits on every path).
///
/// # Panics
/// As [`weighted_group`], and if `isa` is not available.
#[allow(clippy::too_many_arguments)]
pub fn weighted_group_on(
    isa: Isa,
    t: KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
) {
    check_values(t, a, lda, len, v, w, out.len());
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    let done = match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F/BW/VL available (checked above); bounds checked.
        Isa::Avx512Vnni => unsafe { super::avx512::q_weighted(t, a, lda, len, v, out, w) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA and F16C available (checked above); bounds checked.
        Isa::Avx2 | Isa::AvxVnni => unsafe { super::avx2::q_weighted(t, a, lda, len, v, out, w) },
        _ => 0,
    };
    if done < w {
        weighted_part(t, a, lda, len, v, out, w, done);
    }
}

/// The scalar reference of [`weighted_group`].
///
/// # Panics
/// As [`weighted_group`].
pub fn weighted_group_ref(
    t: KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
) {
    check_values(t, a, lda, len, v, w, out.len());
    weighted_part(t, a, lda, len, v, out, w, 0);
}

/// The reference's outputs `x0 <= x < w` of every row.
#[allow(clippy::too_many_arguments)]
pub(super) fn weighted_part(
    t: KvQuant,
    a: &[f32],
    lda: usize,
    len: usize,
    v: &[u8],
    out: &mut [f32],
    w: usize,
    x0: usize,
) {
    let (rb, bb) = (row_bytes(t, w), t.block_bytes());
    for (i, o) in out.chunks_exact_mut(w).enumerate() {
        for (x, ox) in o.iter_mut().enumerate().skip(x0) {
            let (g, k) = (x / QK, x % QK);
            let mut acc = 0f32;
            for j in 0..len {
                let blk = &v[j * rb + g * bb..j * rb + (g + 1) * bb];
                let c = a[i * lda + j] * f16_at(blk, 0);
                let val = match t {
                    KvQuant::Q8_0 => qval(t, blk[2 + k], false),
                    KvQuant::Q4_0 => qval(t, blk[2 + k % 16], k >= 16),
                };
                acc = c.mul_add(val, acc);
            }
            *ox = acc;
        }
    }
}

/// `x` dequantized from a row of [`row_bytes`] (the f32 values the sums
/// above multiply: for tests and references).
pub fn dequantize_row(t: KvQuant, row: &[u8], x: &mut [f32]) {
    let bb = t.block_bytes();
    for (i, xi) in x.iter_mut().enumerate() {
        let blk = &row[i / QK * bb..];
        let k = i % QK;
        let val = match t {
            KvQuant::Q8_0 => qval(t, blk[2 + k], false),
            KvQuant::Q4_0 => qval(t, blk[2 + k % 16], k >= 16),
        };
        *xi = f16_at(blk, 0) * val;
    }
}
