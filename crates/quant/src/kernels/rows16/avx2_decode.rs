//! AVX2 decoders (group-block → [`Stage`]) for the row-interleaved layouts,
//! one per type, each writing the stage the scalar decoder writes, bit for
//! bit (tested per type, with ragged row groups, all-zero blocks and
//! extreme f16 scales).
//!
//! Without them the AVX2 path staged through [`decode_scalar`], which
//! gathers each row's block back out of the group-block and decodes it
//! element by element: far slower than the dot loops it feeds, in decode
//! and in prefill alike.
//!
//! A 64-byte word of a long field holds one 32-bit lane per row, so a
//! 256-bit register covers half a row group: every decoder runs twice, on
//! rows 0..8 and rows 8..16 ("half" `h`, 32 bytes into each word), and the
//! stage's layout (`[word][row][4 bytes]`, 64-byte aligned) takes the two
//! halves as two aligned stores. The 2-byte fields (`d`, `dmin`,
//! `scales_h`) give 16 bytes per half, MXFP4's 1-byte `e` 8.
//!
//! What AVX-512 has and AVX2 lacks, and what stands in for it here:
//! per-element 16-bit shifts (`vpsrlvw`; every shift of a decoder is the
//! same for all elements, so the shift-by-count forms do), masked blends
//! (`vpblendvb` on a compare), unsigned compares (the compared values are
//! small, so signed ones do), float xor on 512 bits (`vxorps` is plain
//! AVX). Q5_0/Q5_1's fifth bits are spread by a byte shuffle and a compare
//! instead of a 32-bit multiply (`vpmulld` is two slow µops on most AVX2
//! cores). The lookup types' `vpshufb` picks within each 128-bit lane: the
//! indices are 4-bit codes, so the 16-entry table is simply repeated in
//! both lanes.
//!
//! These decoders stage a matrix about two orders of magnitude faster than
//! the scalar decoder, in about the time the AVX-512 decoders take with half
//! the instructions (`stage_probe`, `rows16_probe`; figures:
//! docs/perf-history/kernels.md). For n ≤ 8 the same decoders feed
//! `avx2_direct.rs` (registers, no stage) through [`with_dec`].

use super::facts::{
    iq4_xs, mxfp4, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, WORD,
};
use super::{decode_scalar, prefetch_l2, Kind, Stage, LUT_IQ4NL, LUT_MXFP4, R};
use std::arch::x86_64::*;

/// A type's decoder over one group-block, one half (8 rows) at a time.
pub(super) trait Dec: Sized {
    /// 32-element blocks per ggml block.
    const BLOCKS: usize;
    /// Whether the kind has 16-element sub-blocks (else 32).
    const SUB16: bool;
    /// Whether the kind has mins (asymmetric).
    const ASYM: bool;
    /// The largest staged code `u` (what bounds `vpmaddubsw(u, xq)`).
    const UMAX: u32;
    /// Whether the sub-block scales are applied as integers
    /// ([`Kind::iscale`](super::Kind): the stage's `iscales` and `d`).
    const ISCALE: bool = false;
    /// The decoder of the group-block at `p`.
    fn new(p: *const u8) -> Self;
    /// The group-block's first byte.
    fn ptr(&self) -> *const u8;
    /// Writes half `h`'s scales (and, for asymmetric kinds, mins) to the
    /// stage: lanes `8h .. 8h + 8` of each sub-block's row.
    ///
    /// # Safety
    /// AVX2, FMA and F16C available; the group-block is readable; `h < 2`.
    unsafe fn scales(&self, h: usize, st: &mut Stage);
    /// The unsigned codes of 32-element block `kb` for half `h`: word `j`
    /// (elements `4j .. 4j + 4`) of rows `8h .. 8h + 8`.
    ///
    /// # Safety
    /// As [`Dec::scales`], and `kb < Self::BLOCKS`.
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8];
}

/// `[e(0), …, e(n - 1)]` of `__m256i`, as a loop: a closure (as in
/// `std::array::from_fn`) does not inherit the caller's target features, so
/// its intrinsics would be calls rather than instructions.
macro_rules! arr {
    ($n:expr, |$j:ident| $e:expr) => {{
        let mut out = [_mm256_setzero_si256(); $n];
        for $j in 0..$n {
            out[$j] = $e;
        }
        out
    }};
}

/// 32 bytes at `p`.
///
/// # Safety
/// AVX available; 32 readable bytes at `p`.
#[inline(always)]
unsafe fn ld(p: *const u8) -> __m256i {
    // SAFETY: per this fn's contract (unaligned load).
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Half `h` of word `w` of the long field at `f`: rows `8h .. 8h + 8`,
/// bytes `4w .. 4w + 4` of each row's field, one 32-bit lane per row.
///
/// # Safety
/// AVX available; word `w` of the field inside the group-block; `h < 2`.
#[inline(always)]
unsafe fn word(f: *const u8, w: usize, h: usize) -> __m256i {
    // SAFETY: the word's 64 bytes are readable; the half is 32 of them.
    unsafe { ld(f.add(WORD * w + 32 * h)) }
}

/// Half `h` of the 2-byte f16 field at `f` (`[16 rows][2]`) as f32.
///
/// # Safety
/// F16C available; the field inside the group-block; `h < 2`.
#[inline(always)]
unsafe fn f16x8(f: *const u8, h: usize) -> __m256 {
    // SAFETY: the field's 32 bytes are readable; the half is 16 of them.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(f.add(16 * h).cast())) }
}

/// Stores 8 rows' values into lanes `8h .. 8h + 8` of a stage row.
///
/// # Safety
/// AVX available; `h < 2`.
#[inline(always)]
unsafe fn put(dst: &mut [f32; R], h: usize, v: __m256) {
    debug_assert!(h < 2);
    // SAFETY: 8 f32 at 8h inside the 16 of `dst`.
    unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(8 * h), v) }
}

/// `-v`, as a sign flip (the scalar decoder's `-(dmin * m)`).
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn neg(v: __m256) -> __m256 {
    // SAFETY: register-only.
    unsafe { _mm256_xor_ps(v, _mm256_set1_ps(-0.0)) }
}

/// Each 32-bit lane of `v` shifted right by `n` (the same for all lanes).
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn srl32(v: __m256i, n: u32) -> __m256i {
    // SAFETY: register-only.
    unsafe { _mm256_srl_epi32(v, _mm_cvtsi32_si128(n as i32)) }
}

/// Each 32-bit lane of `v` shifted left by `n`.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn sll32(v: __m256i, n: u32) -> __m256i {
    // SAFETY: register-only.
    unsafe { _mm256_sll_epi32(v, _mm_cvtsi32_si128(n as i32)) }
}

/// Each 16-bit lane of `v` shifted right by `n`.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn srl16(v: __m256i, n: u32) -> __m256i {
    // SAFETY: register-only.
    unsafe { _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32)) }
}

/// Each 16-bit lane of `v` shifted left by `n` bits (right by `-n` when
/// negative), `|n| < 8`: the decoders' shifts, which a block index picks,
/// as immediate shifts (none for 0) behind a branch the block loop
/// predicts, instead of shifts by a register count.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn shift16(v: __m256i, n: i32) -> __m256i {
    // SAFETY: register-only.
    unsafe {
        match n {
            0 => v,
            1 => _mm256_slli_epi16::<1>(v),
            2 => _mm256_slli_epi16::<2>(v),
            3 => _mm256_slli_epi16::<3>(v),
            4 => _mm256_slli_epi16::<4>(v),
            5 => _mm256_slli_epi16::<5>(v),
            6 => _mm256_slli_epi16::<6>(v),
            7 => _mm256_slli_epi16::<7>(v),
            -1 => _mm256_srli_epi16::<1>(v),
            -2 => _mm256_srli_epi16::<2>(v),
            -3 => _mm256_srli_epi16::<3>(v),
            -4 => _mm256_srli_epi16::<4>(v),
            -5 => _mm256_srli_epi16::<5>(v),
            -6 => _mm256_srli_epi16::<6>(v),
            -7 => _mm256_srli_epi16::<7>(v),
            _ if n > 0 => _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)),
            _ => srl16(v, n.unsigned_abs()),
        }
    }
}

/// Bit `from` of every byte of `v` moved to bit `to`, all other bits
/// cleared (16-bit shifts: the moved bit stays inside its byte, and the
/// mask drops what crossed from the neighbour).
///
/// # Safety
/// AVX2 available; `from, to < 8`.
#[inline(always)]
unsafe fn bit_to(v: __m256i, from: u32, to: u32) -> __m256i {
    // SAFETY: register-only.
    unsafe {
        let moved = shift16(v, to as i32 - from as i32);
        _mm256_and_si256(moved, _mm256_set1_epi8((1u8 << to) as i8))
    }
}

/// `a & m` per 32-bit lane, `m` a small mask.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn and32(a: __m256i, m: i32) -> __m256i {
    // SAFETY: register-only.
    unsafe { _mm256_and_si256(a, _mm256_set1_epi32(m)) }
}

/// `d * (v as f32)` per lane: a scale from its f32 super-scale and an
/// integer factor, rounded once as the scalar decoder does.
///
/// # Safety
/// AVX available.
#[inline(always)]
unsafe fn scaled(d: __m256, v: __m256i) -> __m256 {
    // SAFETY: register-only.
    unsafe { _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)) }
}

/// A staged-code table repeated in both 128-bit lanes, for `vpshufb`.
///
/// # Safety
/// AVX2 available.
#[inline(always)]
unsafe fn lut(t: &[u8; 16]) -> __m256i {
    // SAFETY: 16 readable bytes.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) }
}

/// The codes of a 4-bit field's 4 words at `qs` for half `h`: byte `i`'s
/// low nibble is element `i`, its high nibble element `i + 16` (ggml's
/// 32-element order), so word `j`'s low nibbles are code word `j` and its
/// high nibbles code word `j + 4`; each through `table` when given.
///
/// # Safety
/// AVX2 available; 4 words at `qs` inside the group-block; `h < 2`.
#[inline(always)]
unsafe fn nibbles(qs: *const u8, h: usize, table: Option<__m256i>) -> [__m256i; 8] {
    // SAFETY: per this fn's contract.
    unsafe {
        let nib = _mm256_set1_epi8(0x0F);
        let mut c = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let w = word(qs, j, h);
            let lo = _mm256_and_si256(w, nib);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), nib);
            (c[j], c[j + 4]) = match table {
                Some(t) => (_mm256_shuffle_epi8(t, lo), _mm256_shuffle_epi8(t, hi)),
                None => (lo, hi),
            };
        }
        c
    }
}

/// Q8_0: d @0, qs @32 (8 words). u = q + 128 = q ^ 0x80.
pub(super) struct Q8_0(*const u8);
impl Dec for Q8_0 {
    const BLOCKS: usize = 1;
    const SUB16: bool = false;
    const ASYM: bool = false;
    const UMAX: u32 = 255;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        // SAFETY: d inside the 544-byte group-block.
        unsafe { put(&mut st.scales[0], h, f16x8(self.0.add(q8_0::D), h)) }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize, h: usize) -> [__m256i; 8] {
        // SAFETY: the 8 words of qs.
        unsafe {
            let flip = _mm256_set1_epi8(i8::MIN);
            arr!(8, |j| _mm256_xor_si256(
                word(self.0.add(q8_0::QS), j, h),
                flip
            ))
        }
    }
}

/// Q4_0 (d @0, qs @32) and Q4_1 (d @0, m @32, qs @64): u = the nibble
/// (Q4_0's OFF 8 undoes its `- 8`; Q4_1 has OFF 0).
pub(super) struct Q4<const MIN: bool>(*const u8);
impl<const MIN: bool> Dec for Q4<MIN> {
    const BLOCKS: usize = 1;
    const SUB16: bool = false;
    const ASYM: bool = MIN;
    const UMAX: u32 = 15;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        // SAFETY: d (and m) inside the 288- or 320-byte group-block.
        unsafe {
            put(&mut st.scales[0], h, f16x8(self.0.add(q4_0::D), h));
            if MIN {
                put(&mut st.mins[0], h, f16x8(self.0.add(q4_1::M), h));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize, h: usize) -> [__m256i; 8] {
        // SAFETY: the 4 words of qs.
        unsafe { nibbles(self.0.add(if MIN { q4_1::QS } else { q4_0::QS }), h, None) }
    }
}

/// Q5_0 (d @0, qh @32, qs @96) and Q5_1 (d @0, m @32, qh @64, qs @128):
/// u = nibble | (bit e of qh) << 4 (Q5_0's OFF 16 undoes its `- 16`).
pub(super) struct Q5<const MIN: bool>(*const u8);
impl<const MIN: bool> Dec for Q5<MIN> {
    const BLOCKS: usize = 1;
    const SUB16: bool = false;
    const ASYM: bool = MIN;
    const UMAX: u32 = 31;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        // SAFETY: d (and m) inside the 352- or 384-byte group-block.
        unsafe {
            put(&mut st.scales[0], h, f16x8(self.0.add(q5_0::D), h));
            if MIN {
                put(&mut st.mins[0], h, f16x8(self.0.add(q5_1::M), h));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize, h: usize) -> [__m256i; 8] {
        let (qh, qs) = if MIN {
            (q5_1::QH, q5_1::QS)
        } else {
            (q5_0::QH, q5_0::QS)
        };
        // SAFETY: the one word of qh and the 4 of qs.
        unsafe {
            let mut c = nibbles(self.0.add(qs), h, None);
            let bits = word(self.0.add(qh), 0, h);
            // Within each 128-bit lane, row r's lane is bytes 4r .. 4r + 4.
            let lane = _mm256_setr_epi8(
                0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, //
                0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
            );
            let five = _mm256_set1_epi8(0x10);
            for (j, cj) in c.iter_mut().enumerate() {
                // Elements 4j .. 4j + 4 have bits 4j .. 4j + 4 of qh: the
                // low or high nibble of byte j / 2. That byte into all four
                // bytes of the row's lane, then byte t tests bit t of the
                // nibble.
                let idx = _mm256_add_epi8(lane, _mm256_set1_epi8((j / 2) as i8));
                let b = _mm256_shuffle_epi8(bits, idx);
                let sel = _mm256_set1_epi32(0x0804_0201 << (4 * (j % 2)));
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
                *cj = _mm256_or_si256(*cj, _mm256_and_si256(set, five));
            }
            c
        }
    }
}

/// Q4_K: d @0, dmin @32, scales @64 (3 words), qs @256 (32 words).
/// Q5_K: the same, qh @256 (8 words), qs @768. u = q (OFF 0).
pub(super) struct Q4K<const FIFTH: bool>(*const u8);
impl<const FIFTH: bool> Dec for Q4K<FIFTH> {
    const BLOCKS: usize = 8;
    const SUB16: bool = false;
    const ASYM: bool = true;
    const UMAX: u32 = if FIFTH { 31 } else { 15 };
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        let p = self.0;
        // SAFETY: d, dmin and scales inside the 2304- or 2816-byte group-block.
        unsafe {
            let d = f16x8(p.add(q4_k::D), h);
            let dmin = f16x8(p.add(q4_k::DMIN), h);
            let w: [__m256i; 3] = arr!(3, |i| word(p.add(q4_k::SCALES), i, h));
            // ggml's get_scale_min_k4 on the 12 bytes (3 lanes) of each row:
            // sub-blocks 0..4 are the low 6 bits of bytes 0..4 (scale) and
            // 4..8 (min); 4..8 take their low 4 bits from the nibbles of
            // bytes 8..12 and their top 2 from the spare bits 6..8 above.
            for j in 0..8u32 {
                let (sc, mn) = if j < 4 {
                    (and32(srl32(w[0], 8 * j), 63), and32(srl32(w[1], 8 * j), 63))
                } else {
                    let b = 8 * (j - 4);
                    let top = |x| _mm256_slli_epi32::<4>(and32(srl32(x, b + 6), 3));
                    (
                        _mm256_or_si256(and32(srl32(w[2], b), 15), top(w[0])),
                        _mm256_or_si256(and32(srl32(w[2], b + 4), 15), top(w[1])),
                    )
                };
                let j = j as usize;
                put(&mut st.scales[j], h, scaled(d, sc));
                put(&mut st.mins[j], h, neg(scaled(dmin, mn)));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8] {
        let p = self.0;
        // Bytes 32c .. 32c + 32 of qs hold elements 64c .. 64c + 32 (low
        // nibbles) and 64c + 32 .. 64c + 64 (high): block kb is words
        // 8 (kb / 2) .. of qs, nibble kb % 2; Q5_K's fifth bit of element
        // 32 kb + b is bit kb of qh byte b.
        // SAFETY: words 8 (kb / 2) + j of qs and j of qh, kb < 8.
        unsafe {
            let qs = p.add(if FIFTH { q5_k::QS } else { q4_k::QS });
            let nib = _mm256_set1_epi8(0x0F);
            arr!(8, |j| {
                let q = shift16(word(qs, 8 * (kb / 2) + j, h), -4 * (kb % 2) as i32);
                let u = _mm256_and_si256(q, nib);
                if FIFTH {
                    _mm256_or_si256(u, bit_to(word(p.add(q5_k::QH), j, h), kb as u32, 4))
                } else {
                    u
                }
            })
        }
    }
}

/// Q6_K: ql @0 (32 words), qh @2048 (16 words), scales @3072 (4 words),
/// d @3328. u = ql nibble | qh 2 bits << 4 (OFF 32 undoes the `- 32`).
pub(super) struct Q6K(*const u8);
impl Dec for Q6K {
    const BLOCKS: usize = 8;
    const SUB16: bool = true;
    const ASYM: bool = false;
    const UMAX: u32 = 63;
    const ISCALE: bool = true;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        let p = self.0;
        // SAFETY: d and scales inside the 3360-byte group-block.
        unsafe {
            let d = f16x8(p.add(q6_k::D), h);
            put(&mut st.d, h, d);
            for w in 0..4 {
                let sw = word(p.add(q6_k::SCALES), w, h);
                for t in 0..4u32 {
                    // Byte t of each lane, sign-extended: to the top, back down.
                    let s = _mm256_srai_epi32::<24>(sll32(sw, 24 - 8 * t));
                    let i = &mut st.iscales[4 * w + t as usize];
                    _mm256_storeu_si256(i.as_mut_ptr().add(8 * h).cast(), s);
                    put(&mut st.scales[4 * w + t as usize], h, scaled(d, s));
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8] {
        let p = self.0;
        // Element 128 half + r: ql byte 64 half + r % 64 (nibble r / 64),
        // qh byte 32 half + r % 32 (bits 2 (r / 32)); block kb is r =
        // 32 q + b, q = kb % 4.
        // SAFETY: words 16 half + 8 (q % 2) + j of ql, 8 half + j of qh.
        unsafe {
            let (half, q) = (kb / 4, kb % 4);
            let nib = _mm256_set1_epi8(0x0F);
            let top = _mm256_set1_epi8(0x30);
            arr!(8, |j| {
                let l = shift16(
                    word(p.add(q6_k::QL), 16 * half + 8 * (q % 2) + j, h),
                    -4 * (q / 2) as i32,
                );
                let qh = word(p.add(q6_k::QH), 8 * half + j, h);
                // Bits 2q, 2q + 1 to bits 4, 5 (inside the byte, as in `bit_to`).
                let hi = shift16(qh, 4 - 2 * q as i32);
                _mm256_or_si256(_mm256_and_si256(l, nib), _mm256_and_si256(hi, top))
            })
        }
    }
}

/// Q3_K: hmask @0 (8 words), qs @512 (16 words), scales @1536 (3 words),
/// d @1728. u = ql | hbit << 2 (= q + 4, OFF 4).
pub(super) struct Q3K(*const u8);
impl Dec for Q3K {
    const BLOCKS: usize = 8;
    const SUB16: bool = true;
    const ASYM: bool = false;
    const UMAX: u32 = 7;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        let p = self.0;
        // SAFETY: d and scales inside the 1760-byte group-block.
        unsafe {
            let d = f16x8(p.add(q3_k::D), h);
            let w: [__m256i; 3] = arr!(3, |i| word(p.add(q3_k::SCALES), i, h));
            // 6-bit scale i: low 4 bits the nibble i / 8 of byte i % 8 (words
            // 0, 1), top 2 bits 2 (i / 4) .. of byte 8 + i % 4 (word 2).
            for i in 0..16u32 {
                let b = i % 8;
                let lo = and32(srl32(w[(b / 4) as usize], 8 * (b % 4) + 4 * (i / 8)), 15);
                let hi = and32(srl32(w[2], 8 * (i % 4) + 2 * (i / 4)), 3);
                let v = _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi));
                let v = _mm256_sub_epi32(v, _mm256_set1_epi32(32));
                put(&mut st.scales[i as usize], h, scaled(d, v));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8] {
        let p = self.0;
        // Element 128 half + 32 s + b: bits 2s of qs byte 32 half + b, and
        // bit (element / 32) = kb of hmask byte b.
        // SAFETY: words 8 half + j of qs and j of hmask.
        unsafe {
            let (half, s) = (kb / 4, kb % 4);
            let three = _mm256_set1_epi8(3);
            arr!(8, |j| {
                let l = shift16(word(p.add(q3_k::QS), 8 * half + j, h), -2 * s as i32);
                let hb = bit_to(word(p.add(q3_k::HMASK), j, h), kb as u32, 2);
                _mm256_or_si256(_mm256_and_si256(l, three), hb)
            })
        }
    }
}

/// Q2_K: scales @0 (4 words), qs @256 (16 words), d @1280, dmin @1312.
/// u = q (OFF 0).
pub(super) struct Q2K(*const u8);
impl Dec for Q2K {
    const BLOCKS: usize = 8;
    const SUB16: bool = true;
    const ASYM: bool = true;
    const UMAX: u32 = 3;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        let p = self.0;
        // SAFETY: scales, d and dmin inside the 1344-byte group-block.
        unsafe {
            let d = f16x8(p.add(q2_k::D), h);
            let dmin = f16x8(p.add(q2_k::DMIN), h);
            for w in 0..4 {
                let sw = word(p.add(q2_k::SCALES), w, h);
                for t in 0..4u32 {
                    // Byte t: scale in the low nibble, min in the high.
                    let b = srl32(sw, 8 * t);
                    let j = 4 * w + t as usize;
                    put(&mut st.scales[j], h, scaled(d, and32(b, 15)));
                    let mn = and32(_mm256_srli_epi32::<4>(b), 15);
                    put(&mut st.mins[j], h, neg(scaled(dmin, mn)));
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8] {
        let p = self.0;
        // Element 128 half + 32 s + b: bits 2s of qs byte 32 half + b.
        // SAFETY: words 8 half + j of qs.
        unsafe {
            let (half, s) = (kb / 4, kb % 4);
            let three = _mm256_set1_epi8(3);
            arr!(8, |j| {
                let q = shift16(word(p.add(q2_k::QS), 8 * half + j, h), -2 * s as i32);
                _mm256_and_si256(q, three)
            })
        }
    }
}

/// IQ4_NL: d @0, qs @32; u = kvalues_iq4nl[nibble] + 128.
pub(super) struct Iq4Nl(*const u8);
impl Dec for Iq4Nl {
    const BLOCKS: usize = 1;
    const SUB16: bool = false;
    const ASYM: bool = false;
    const UMAX: u32 = 255;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        // SAFETY: d inside the 288-byte group-block.
        unsafe { put(&mut st.scales[0], h, f16x8(self.0.add(q4_0::D), h)) }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize, h: usize) -> [__m256i; 8] {
        // SAFETY: the 4 words of qs.
        unsafe { nibbles(self.0.add(q4_0::QS), h, Some(lut(&LUT_IQ4NL))) }
    }
}

/// IQ4_XS: d @0, scales_h @32 (16 × u16), scales_l @64 (1 word), qs @128
/// (32 words, 4 per sub-block in IQ4_NL's nibble order).
pub(super) struct Iq4Xs(*const u8);
impl Dec for Iq4Xs {
    const BLOCKS: usize = 8;
    const SUB16: bool = false;
    const ASYM: bool = false;
    const UMAX: u32 = 255;
    const ISCALE: bool = true;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        let p = self.0;
        // SAFETY: d, scales_h and scales_l inside the 2176-byte group-block.
        unsafe {
            let d = f16x8(p.add(iq4_xs::D), h);
            let sh =
                _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(iq4_xs::SCALES_H + 16 * h).cast()));
            let sl = word(p.add(iq4_xs::SCALES_L), 0, h);
            put(&mut st.d, h, d);
            // Sub-block j: nibble j of scales_l (bits 4j), bits 2j of scales_h.
            for j in 0..8u32 {
                let lo = and32(srl32(sl, 4 * j), 15);
                let hi = and32(srl32(sh, 2 * j), 3);
                let ls = _mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi));
                let ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
                let i = &mut st.iscales[j as usize];
                _mm256_storeu_si256(i.as_mut_ptr().add(8 * h).cast(), ls);
                put(&mut st.scales[j as usize], h, scaled(d, ls));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize, h: usize) -> [__m256i; 8] {
        // SAFETY: words 4 kb .. 4 kb + 4 of qs, kb < 8.
        unsafe {
            nibbles(
                self.0.add(iq4_xs::QS + WORD * 4 * kb),
                h,
                Some(lut(&LUT_IQ4NL)),
            )
        }
    }
}

/// MXFP4: e @0 (`[16][1]`), qs @16; u = kvalues_mxfp4[nibble] + 128, the
/// scale ggml's `e8m0_to_fp32_half(e)`: `2^(e - 128)` as f32 bits, which
/// for `e < 2` is the subnormal `0x0020_0000 << e`.
pub(super) struct Mxfp4(*const u8);
impl Dec for Mxfp4 {
    const BLOCKS: usize = 1;
    const SUB16: bool = false;
    const ASYM: bool = false;
    const UMAX: u32 = 255;
    #[inline(always)]
    fn new(p: *const u8) -> Self {
        Self(p)
    }
    #[inline(always)]
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, h: usize, st: &mut Stage) {
        // SAFETY: e inside the 272-byte group-block (8 bytes of the 16).
        unsafe {
            let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(self.0.add(mxfp4::E + 8 * h).cast()));
            let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
            let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
            // e is 0..=255 in an i32: a signed compare is exact.
            let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
            let bits = _mm256_blendv_epi8(normal, sub, small);
            put(&mut st.scales[0], h, _mm256_castsi256_ps(bits));
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize, h: usize) -> [__m256i; 8] {
        // SAFETY: the 4 words of qs.
        unsafe { nibbles(self.0.add(mxfp4::QS), h, Some(lut(&LUT_MXFP4))) }
    }
}

/// Evaluates `$body` with `$d` bound to the decoder of `$k`'s type for the
/// group-block at `$p`: `Some(body)`, or `None` for a type without one.
macro_rules! with_dec {
    ($k:expr, $p:expr, |$d:ident| $body:expr) => {
        $crate::kernels::rows16::avx2_decode::dec_match!(
            $k, $p, $d, $body,
            Q8_0 => dec::Q8_0, Q4_0 => dec::Q4<false>, Q4_1 => dec::Q4<true>,
            Q5_0 => dec::Q5<false>, Q5_1 => dec::Q5<true>, Q2_K => dec::Q2K,
            Q3_K => dec::Q3K, Q4_K => dec::Q4K<false>, Q5_K => dec::Q4K<true>,
            Q6_K => dec::Q6K, IQ4_NL => dec::Iq4Nl, IQ4_XS => dec::Iq4Xs, MXFP4 => dec::Mxfp4,
        )
    };
}
pub(super) use with_dec;

/// [`with_dec`]'s match over its table of (type, decoder).
macro_rules! dec_match {
    ($k:expr, $p:expr, $d:ident, $body:expr, $($t:ident => $ty:ty),* $(,)?) => {{
        use $crate::kernels::rows16::avx2_decode as dec;
        match $k.t {
            $($crate::GgmlType::$t => {
                let $d = <$ty as dec::Dec>::new($p);
                Some($body)
            })*
            _ => None,
        }
    }};
}
pub(super) use dec_match;

/// Decodes one group-block with `d` into `st`, half by half.
///
/// # Safety
/// As [`Dec::scales`] for both halves and every block.
#[inline(always)]
unsafe fn stage_with<D: Dec>(d: &D, st: &mut Stage) {
    for h in 0..2 {
        // SAFETY: per this fn's contract; the stores are to block kb < 8 of
        // the 64-byte aligned stage, word j's half h (32-byte aligned).
        unsafe {
            d.scales(h, st);
            for kb in 0..D::BLOCKS {
                let c = d.block(kb, h);
                let out = st.codes[kb].as_mut_ptr();
                for (j, cj) in c.iter().enumerate() {
                    _mm256_store_si256(out.add(R * 4 * j + 32 * h).cast(), *cj);
                }
            }
        }
    }
}

/// Decodes the group-block `gb` of kind `k` into `st` (the scalar
/// decoder's stage: codes, scales and, for asymmetric kinds, mins; the
/// symmetric kinds' mins are never read and are left as they are), and
/// prefetches the group-block that starts at `next` (any address:
/// prefetches do not fault).
///
/// # Safety
/// AVX2, FMA and F16C available.
///
/// # Panics
/// If `gb.len() != k.group_block()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn decode(k: &Kind, gb: &[u8], st: &mut Stage, next: *const u8) {
    assert_eq!(gb.len(), k.group_block());
    prefetch_l2(next, gb.len());
    let p = gb.as_ptr();
    // SAFETY: the features are enabled here; each decoder reads only inside
    // the group-block (its field offsets are those of `interleave::fields`
    // scaled by 16, for the group-block size asserted above) and writes
    // only the stage.
    unsafe {
        if with_dec!(k, p, |d| stage_with(&d, st)).is_none() {
            decode_scalar(k, gb, st)
        }
    }
}
