//! AVX-512 VNNI decoders (group-block → [`Stage`]) and dot loops for the
//! row-interleaved layouts. Every decoder writes the stage the scalar
//! decoder writes, bit for bit (tested per type), and the dot loops compute
//! the canonical formula of the parent module.

use super::facts::{
    iq4_xs, mxfp4, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, WORD,
};
use super::{decode_scalar, prefetch_l2, Kind, Stage, LUT_IQ4NL, LUT_MXFP4, PF_BYTES, PREP, R, VT};
use crate::GgmlType;
use std::arch::x86_64::*;

/// A type's decoder over one group-block: the 16 rows' scales (and mins)
/// into the stage, and the unsigned codes of one 32-element block as 8
/// registers (word `j` = elements `4j .. 4j + 4`, one lane per row).
trait Dec: Sized {
    /// Whether the kind has 16-element sub-blocks (else 32).
    const SUB16: bool;
    /// Whether the kind has mins (asymmetric).
    const ASYM: bool;
    /// Whether a ggml block is one 32-element block (its activation scale
    /// is then applied every block: the tile keeps its accumulators in
    /// registers).
    const ONE: bool;
    /// Whether the sub-block scales are applied as integers
    /// ([`Kind::iscale`]: the stage's `iscales` and `d`).
    const ISCALE: bool = false;
    /// The decoder of the group-block `off` bytes further on.
    fn at(&self, off: usize) -> Self;
    /// The group-block's first byte (null for the stage).
    fn ptr(&self) -> *const u8;
    /// The stage holding this group-block's scales and mins: `st`, where
    /// [`Dec::scales`] writes them, unless the decoder is a stage itself.
    fn stage(&self, st: *mut Stage) -> *mut Stage {
        st
    }
    /// Writes the stage's scales and mins.
    ///
    /// # Safety
    /// AVX-512 F/BW available; the group-block is readable; `st` valid for
    /// writes of its scales and mins (and not otherwise borrowed).
    unsafe fn scales(&self, st: *mut Stage);
    /// The codes of 32-element block `kb`.
    ///
    /// # Safety
    /// As [`Dec::scales`], `kb < k.blocks()`.
    unsafe fn block(&self, kb: usize) -> [__m512i; 8];
}

#[inline(always)]
unsafe fn ld(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes.
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

#[inline(always)]
unsafe fn st_f32(dst: *mut [f32; R], v: __m512) {
    // SAFETY: 16 f32 in the stage array.
    unsafe { _mm512_storeu_ps(dst as *mut f32, v) }
}

/// 16 f16 values (32 bytes at `p`) as f32.
#[inline(always)]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// The low and high nibbles of 4 words at `qs` as 8 code words (byte i low
/// nibble = element i, high = element i + 16: ggml's 32-element order),
/// each through `table` when given (`vpshufb`).
#[inline(always)]
unsafe fn nibbles(qs: *const u8, table: Option<__m512i>) -> [__m512i; 8] {
    // SAFETY: 4 words at `qs` inside the group-block.
    unsafe {
        let nib = _mm512_set1_epi8(0x0F);
        let mut c = [_mm512_setzero_si512(); 8];
        for j in 0..4 {
            let w = ld(qs.add(64 * j));
            let (lo, hi) = (
                _mm512_and_si512(w, nib),
                _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib),
            );
            (c[j], c[j + 4]) = match table {
                Some(t) => (_mm512_shuffle_epi8(t, lo), _mm512_shuffle_epi8(t, hi)),
                None => (lo, hi),
            };
        }
        c
    }
}

/// Q8_0: d @0 (16 × 2), qs @32 (8 words). u = q ^ 0x80.
struct Q8_0(*const u8);
impl Dec for Q8_0 {
    const SUB16: bool = false;
    const ASYM: bool = false;
    const ONE: bool = true;
    fn at(&self, off: usize) -> Self {
        Q8_0(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        // SAFETY: inside the 544-byte group-block.
        unsafe { st_f32(&raw mut (*st).scales[0], f16x16(self.0.add(q8_0::D))) }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize) -> [__m512i; 8] {
        // SAFETY: as above.
        unsafe {
            let x80 = _mm512_set1_epi8(-128);
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                *cj = _mm512_xor_si512(ld(self.0.add(q8_0::QS + WORD * j)), x80);
            }
            c
        }
    }
}

/// Q4_0 (d @0, qs @32) and Q4_1 (d @0, m @32, qs @64): the nibbles.
struct Q4_0<const MIN: bool>(*const u8);
impl<const MIN: bool> Dec for Q4_0<MIN> {
    const SUB16: bool = false;
    const ASYM: bool = MIN;
    const ONE: bool = true;
    fn at(&self, off: usize) -> Self {
        Q4_0(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        // SAFETY: inside the 288- or 320-byte group-block.
        unsafe {
            st_f32(&raw mut (*st).scales[0], f16x16(self.0.add(q4_0::D)));
            if MIN {
                st_f32(&raw mut (*st).mins[0], f16x16(self.0.add(q4_1::M)));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize) -> [__m512i; 8] {
        // SAFETY: as above.
        unsafe { nibbles(self.0.add(if MIN { q4_1::QS } else { q4_0::QS }), None) }
    }
}

/// Q4_K: d @0, dmin @32, scales @64 (3 words), qs @256 (32 words).
/// Q5_K: the same, qh @256 (8 words), qs @768.
struct Q4K(*const u8, bool);
impl Dec for Q4K {
    const SUB16: bool = false;
    const ASYM: bool = true;
    const ONE: bool = false;
    fn at(&self, off: usize) -> Self {
        Q4K(self.0.wrapping_add(off), self.1)
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        let p = self.0;
        // SAFETY: inside the 2304- or 2816-byte group-block.
        unsafe {
            let d = f16x16(p.add(q4_k::D));
            let dmin = f16x16(p.add(q4_k::DMIN));
            let w0 = ld(p.add(q4_k::SCALES));
            let w1 = ld(p.add(q4_k::SCALES + WORD));
            let w2 = ld(p.add(q4_k::SCALES + 2 * WORD));
            let m6 = _mm512_set1_epi32(63);
            let m4 = _mm512_set1_epi32(15);
            let m2 = _mm512_set1_epi32(3);
            let sign = _mm512_set1_epi32(i32::MIN);
            // ggml get_scale_min_k4, one 32-bit lane per row.
            for j in 0..8 {
                let (sc, mn) = if j < 4 {
                    let sh = _mm512_set1_epi32(8 * j as i32);
                    (
                        _mm512_and_si512(_mm512_srlv_epi32(w0, sh), m6),
                        _mm512_and_si512(_mm512_srlv_epi32(w1, sh), m6),
                    )
                } else {
                    let t = 8 * (j as i32 - 4);
                    let lo = _mm512_srlv_epi32(w2, _mm512_set1_epi32(t));
                    let sh = _mm512_set1_epi32(t + 6);
                    let h0 = _mm512_and_si512(_mm512_srlv_epi32(w0, sh), m2);
                    let h1 = _mm512_and_si512(_mm512_srlv_epi32(w1, sh), m2);
                    (
                        _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi32::<4>(h0)),
                        _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi32::<4>(lo), m4),
                            _mm512_slli_epi32::<4>(h1),
                        ),
                    )
                };
                st_f32(
                    &raw mut (*st).scales[j],
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)),
                );
                let mm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
                // Negation as a sign flip (AVX512F has no float xor).
                st_f32(
                    &raw mut (*st).mins[j],
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mm), sign)),
                );
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        let (q5, p) = (self.1, self.0);
        // SAFETY: as above; words 8(kb/2)+j of qs, j of qh.
        unsafe {
            let qs = p.add(if q5 { q5_k::QS } else { q4_k::QS } + WORD * 8 * (kb / 2));
            let nib = _mm512_set1_epi8(0x0F);
            let one = _mm512_set1_epi8(1);
            let shift = _mm512_set1_epi16(kb as i16);
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                let w = ld(qs.add(WORD * j));
                let w = if kb % 2 == 1 {
                    _mm512_srli_epi16::<4>(w)
                } else {
                    w
                };
                let mut u = _mm512_and_si512(w, nib);
                if q5 {
                    let h = _mm512_srlv_epi16(ld(p.add(q5_k::QH + WORD * j)), shift);
                    u = _mm512_or_si512(u, _mm512_slli_epi16::<4>(_mm512_and_si512(h, one)));
                }
                *cj = u;
            }
            c
        }
    }
}

/// Q6_K: ql @0 (32 words), qh @2048 (16 words), scales @3072 (4 words),
/// d @3328. u = ql nibble | qh 2 bits << 4 (= q, OFF 32).
struct Q6K(*const u8);
impl Dec for Q6K {
    const SUB16: bool = true;
    const ASYM: bool = false;
    const ONE: bool = false;
    const ISCALE: bool = true;
    fn at(&self, off: usize) -> Self {
        Q6K(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        let p = self.0;
        // SAFETY: inside the 3360-byte group-block.
        unsafe {
            let d = f16x16(p.add(q6_k::D));
            st_f32(&raw mut (*st).d, d);
            for w in 0..4 {
                let sw = ld(p.add(q6_k::SCALES + WORD * w));
                for t in 0..4 {
                    // Signed byte t of each lane.
                    let s = _mm512_srai_epi32::<24>(_mm512_sllv_epi32(
                        sw,
                        _mm512_set1_epi32(24 - 8 * t as i32),
                    ));
                    _mm512_storeu_si512((&raw mut (*st).iscales[4 * w + t]).cast(), s);
                    st_f32(
                        &raw mut (*st).scales[4 * w + t],
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(s)),
                    );
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        let p = self.0;
        // SAFETY: as above.
        unsafe {
            // u = (ql nibble) | (qh bits 2q..2q+2) << 4: the high bits are
            // shifted straight to bits 4-5 (16-bit shifts; what crosses a
            // byte lands outside 0x30 and is masked off), and one bitwise
            // select (vpternlogd, 0xE4: nib ? ql : high) merges the two, so
            // a word costs 3-4 vector operations, not 7.
            let nib = _mm512_set1_epi8(0x0F);
            let hi2 = _mm512_set1_epi8(0x30);
            let (hh, q) = (kb / 4, kb % 4);
            let up = _mm_set_epi64x(0, (4 - 2 * q.min(2)) as i64);
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                let l = ld(p.add(q6_k::QL + WORD * (16 * hh + 8 * (q % 2) + j)));
                let l = if q >= 2 { _mm512_srli_epi16::<4>(l) } else { l };
                let h = ld(p.add(q6_k::QH + WORD * (8 * hh + j)));
                let h = if q == 3 {
                    _mm512_srli_epi16::<2>(h)
                } else {
                    _mm512_sll_epi16(h, up)
                };
                let h = _mm512_and_si512(h, hi2);
                *cj = _mm512_ternarylogic_epi32::<0xE4>(l, h, nib);
            }
            c
        }
    }
}

/// Q5_0 (d @0, qh @32, qs @96) and Q5_1 (d @0, m @32, qh @64, qs @128):
/// u = nibble | (bit e of qh) << 4.
struct Q5<const MIN: bool>(*const u8);
impl<const MIN: bool> Dec for Q5<MIN> {
    const SUB16: bool = false;
    const ASYM: bool = MIN;
    const ONE: bool = true;
    fn at(&self, off: usize) -> Self {
        Q5(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        // SAFETY: inside the 352- or 384-byte group-block.
        unsafe {
            st_f32(&raw mut (*st).scales[0], f16x16(self.0.add(q5_0::D)));
            if MIN {
                st_f32(&raw mut (*st).mins[0], f16x16(self.0.add(q5_1::M)));
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize) -> [__m512i; 8] {
        let (qh, qs) = if MIN {
            (q5_1::QH, q5_1::QS)
        } else {
            (q5_0::QH, q5_0::QS)
        };
        // SAFETY: as above.
        unsafe {
            let mut c = nibbles(self.0.add(qs), None);
            let h = ld(self.0.add(qh));
            let m4 = _mm512_set1_epi32(15);
            let spread = _mm512_set1_epi32(0x0020_4081);
            let ones = _mm512_set1_epi32(0x0101_0101);
            for (j, cj) in c.iter_mut().enumerate() {
                // Bits 4j .. 4j + 4 of qh, one per byte (a carry-free multiply
                // puts bit t at bit 8t), then to bit 4 of each byte.
                let y = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_set1_epi32(4 * j as i32)), m4);
                let b = _mm512_and_si512(_mm512_mullo_epi32(y, spread), ones);
                *cj = _mm512_or_si512(*cj, _mm512_slli_epi32::<4>(b));
            }
            c
        }
    }
}

/// Q3_K: hmask @0 (8 words), qs @512 (16 words), scales @1536 (3 words),
/// d @1728. u = ql + 4 · hbit (= q + 4, OFF 4).
struct Q3K(*const u8);
impl Dec for Q3K {
    const SUB16: bool = true;
    const ASYM: bool = false;
    const ONE: bool = false;
    fn at(&self, off: usize) -> Self {
        Q3K(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        let p = self.0;
        // SAFETY: inside the 1760-byte group-block.
        unsafe {
            let d = f16x16(p.add(q3_k::D));
            let w = [0, 1, 2].map(|i| ld(p.add(q3_k::SCALES + WORD * i)));
            let m4 = _mm512_set1_epi32(15);
            let m2 = _mm512_set1_epi32(3);
            let c32 = _mm512_set1_epi32(32);
            for i in 0..16 {
                let lo_sh = 8 * ((i % 8) % 4) + 4 * (i / 8);
                let lo = _mm512_and_si512(
                    _mm512_srlv_epi32(w[(i % 8) / 4], _mm512_set1_epi32(lo_sh as i32)),
                    m4,
                );
                let hi_sh = 8 * (i % 4) + 2 * (i / 4);
                let hi =
                    _mm512_and_si512(_mm512_srlv_epi32(w[2], _mm512_set1_epi32(hi_sh as i32)), m2);
                let v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)), c32);
                st_f32(
                    &raw mut (*st).scales[i],
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)),
                );
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        let p = self.0;
        // SAFETY: as above.
        unsafe {
            let (h, k2) = (kb / 4, kb % 4);
            let three = _mm512_set1_epi8(3);
            let one = _mm512_set1_epi8(1);
            let sq = _mm512_set1_epi16(2 * k2 as i16);
            let sh = _mm512_set1_epi16(kb as i16);
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                let l = _mm512_and_si512(
                    _mm512_srlv_epi16(ld(p.add(q3_k::QS + WORD * (8 * h + j))), sq),
                    three,
                );
                let hb = _mm512_and_si512(
                    _mm512_srlv_epi16(ld(p.add(q3_k::HMASK + WORD * j)), sh),
                    one,
                );
                *cj = _mm512_or_si512(l, _mm512_slli_epi16::<2>(hb));
            }
            c
        }
    }
}

/// Q2_K: scales @0 (4 words), qs @256 (16 words), d @1280, dmin @1312.
struct Q2K(*const u8);
impl Dec for Q2K {
    const SUB16: bool = true;
    const ASYM: bool = true;
    const ONE: bool = false;
    fn at(&self, off: usize) -> Self {
        Q2K(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        let p = self.0;
        // SAFETY: inside the 1344-byte group-block.
        unsafe {
            let d = f16x16(p.add(q2_k::D));
            let dmin = f16x16(p.add(q2_k::DMIN));
            let m4 = _mm512_set1_epi32(15);
            let sign = _mm512_set1_epi32(i32::MIN);
            for w in 0..4 {
                let sw = ld(p.add(q2_k::SCALES + WORD * w));
                for t in 0..4 {
                    let b = _mm512_srlv_epi32(sw, _mm512_set1_epi32(8 * t as i32));
                    let sc = _mm512_and_si512(b, m4);
                    let mn = _mm512_and_si512(_mm512_srli_epi32::<4>(b), m4);
                    st_f32(
                        &raw mut (*st).scales[4 * w + t],
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)),
                    );
                    let mm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
                    st_f32(
                        &raw mut (*st).mins[4 * w + t],
                        _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mm), sign)),
                    );
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        let p = self.0;
        // SAFETY: as above.
        unsafe {
            let (h, k2) = (kb / 4, kb % 4);
            let three = _mm512_set1_epi8(3);
            let sq = _mm512_set1_epi16(2 * k2 as i16);
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                *cj = _mm512_and_si512(
                    _mm512_srlv_epi16(ld(p.add(q2_k::QS + WORD * (8 * h + j))), sq),
                    three,
                );
            }
            c
        }
    }
}

/// A staged-code table ([`LUT_IQ4NL`], [`LUT_MXFP4`]) replicated per
/// 128-bit lane for `vpshufb`.
#[inline(always)]
unsafe fn lut(t: &[u8; 16]) -> __m512i {
    // SAFETY: 16 readable bytes.
    unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr() as *const __m128i)) }
}

/// IQ4_NL: d @0, qs @32.
struct Iq4Nl(*const u8);
impl Dec for Iq4Nl {
    const SUB16: bool = false;
    const ASYM: bool = false;
    const ONE: bool = true;
    fn at(&self, off: usize) -> Self {
        Iq4Nl(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        // SAFETY: inside the 288-byte group-block.
        unsafe { st_f32(&raw mut (*st).scales[0], f16x16(self.0.add(q4_0::D))) }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize) -> [__m512i; 8] {
        // SAFETY: as above.
        unsafe { nibbles(self.0.add(q4_0::QS), Some(lut(&LUT_IQ4NL))) }
    }
}

/// IQ4_XS: d @0, scales_h @32 (16 × u16), scales_l @64 (one word), qs @128.
struct Iq4Xs(*const u8);
impl Dec for Iq4Xs {
    const SUB16: bool = false;
    const ASYM: bool = false;
    const ONE: bool = false;
    const ISCALE: bool = true;
    fn at(&self, off: usize) -> Self {
        Iq4Xs(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        let p = self.0;
        // SAFETY: inside the 2176-byte group-block.
        unsafe {
            let d = f16x16(p.add(iq4_xs::D));
            let sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                p.add(iq4_xs::SCALES_H) as *const __m256i
            ));
            let sl = ld(p.add(iq4_xs::SCALES_L));
            let m4 = _mm512_set1_epi32(15);
            let m2 = _mm512_set1_epi32(3);
            let c32 = _mm512_set1_epi32(32);
            st_f32(&raw mut (*st).d, d);
            for j in 0..8 {
                let lo =
                    _mm512_and_si512(_mm512_srlv_epi32(sl, _mm512_set1_epi32(4 * j as i32)), m4);
                let hi =
                    _mm512_and_si512(_mm512_srlv_epi32(sh, _mm512_set1_epi32(2 * j as i32)), m2);
                let ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)), c32);
                _mm512_storeu_si512((&raw mut (*st).iscales[j]).cast(), ls);
                st_f32(
                    &raw mut (*st).scales[j],
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls)),
                );
            }
        }
    }
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        // SAFETY: as above; words 4kb .. 4kb + 4 of qs.
        unsafe {
            nibbles(
                self.0.add(iq4_xs::QS + WORD * 4 * kb),
                Some(lut(&LUT_IQ4NL)),
            )
        }
    }
}

/// MXFP4: e @0 (16 bytes), qs @16; scale = ggml's `e8m0_to_fp32_half`.
struct Mxfp4(*const u8);
impl Dec for Mxfp4 {
    const SUB16: bool = false;
    const ASYM: bool = false;
    const ONE: bool = true;
    fn at(&self, off: usize) -> Self {
        Mxfp4(self.0.wrapping_add(off))
    }
    fn ptr(&self) -> *const u8 {
        self.0
    }
    #[inline(always)]
    unsafe fn scales(&self, st: *mut Stage) {
        // SAFETY: inside the 272-byte group-block.
        unsafe {
            let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(self.0.add(mxfp4::E) as *const __m128i));
            let big = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
            let small = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
            let lt2 = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
            let bits = _mm512_mask_blend_epi32(lt2, big, small);
            st_f32(&raw mut (*st).scales[0], _mm512_castsi512_ps(bits));
        }
    }
    #[inline(always)]
    unsafe fn block(&self, _kb: usize) -> [__m512i; 8] {
        // SAFETY: as above.
        unsafe { nibbles(self.0.add(mxfp4::QS), Some(lut(&LUT_MXFP4))) }
    }
}

/// The stage as a decoder (types without a SIMD decoder, and prefill,
/// which decodes once per group-block for many vectors): consecutive staged
/// group-blocks (`.1`: the kind's group-block bytes, by which [`Dec::at`]
/// counts), their scales already in their stages.
struct Staged<const S16: bool, const A: bool, const O: bool, const I: bool>(*const Stage, usize);
impl<const S16: bool, const A: bool, const O: bool, const I: bool> Dec for Staged<S16, A, O, I> {
    const SUB16: bool = S16;
    const ASYM: bool = A;
    const ONE: bool = O;
    const ISCALE: bool = I;
    fn at(&self, off: usize) -> Self {
        Staged(self.0.wrapping_add(off / self.1), self.1)
    }
    fn ptr(&self) -> *const u8 {
        std::ptr::null()
    }
    fn stage(&self, _st: *mut Stage) -> *mut Stage {
        self.0 as *mut Stage
    }
    #[inline(always)]
    unsafe fn scales(&self, _st: *mut Stage) {}
    #[inline(always)]
    unsafe fn block(&self, kb: usize) -> [__m512i; 8] {
        // SAFETY: block kb of the stage (kb < 8).
        unsafe {
            let cp = (*self.0).codes[kb].as_ptr();
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                *cj = _mm512_load_si512(cp.add(64 * j) as *const __m512i);
            }
            c
        }
    }
}

/// Runs `f` with the decoder of `k.t` over the group-block at `p`
/// (`None`: no SIMD decoder; the caller uses the scalar one).
macro_rules! with_dec {
    ($k:expr, $p:expr, |$d:ident| $body:expr) => {
        match $k.t {
            GgmlType::Q8_0 => {
                let $d = Q8_0($p);
                Some($body)
            }
            GgmlType::Q4_0 => {
                let $d = Q4_0::<false>($p);
                Some($body)
            }
            GgmlType::Q4_1 => {
                let $d = Q4_0::<true>($p);
                Some($body)
            }
            GgmlType::Q5_0 => {
                let $d = Q5::<false>($p);
                Some($body)
            }
            GgmlType::Q5_1 => {
                let $d = Q5::<true>($p);
                Some($body)
            }
            GgmlType::Q3_K => {
                let $d = Q3K($p);
                Some($body)
            }
            GgmlType::Q2_K => {
                let $d = Q2K($p);
                Some($body)
            }
            GgmlType::Q4_K => {
                let $d = Q4K($p, false);
                Some($body)
            }
            GgmlType::Q5_K => {
                let $d = Q4K($p, true);
                Some($body)
            }
            GgmlType::Q6_K => {
                let $d = Q6K($p);
                Some($body)
            }
            GgmlType::IQ4_NL => {
                let $d = Iq4Nl($p);
                Some($body)
            }
            GgmlType::IQ4_XS => {
                let $d = Iq4Xs($p);
                Some($body)
            }
            GgmlType::MXFP4 => {
                let $d = Mxfp4($p);
                Some($body)
            }
            _ => None,
        }
    };
}

/// Decodes the group-block `gb` of kind `k` into `st` (scales, mins and
/// codes), and prefetches the group-block that starts at `next` (any
/// address; prefetches do not fault).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI available; `gb.len() == k.group_block()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn decode(k: &Kind, gb: &[u8], st: &mut Stage, next: *const u8) {
    debug_assert_eq!(gb.len(), k.group_block());
    // SAFETY: each decoder reads only inside the group-block (its field
    // offsets are those of `interleave::fields`, scaled by 16) and writes
    // only the stage.
    unsafe {
        prefetch_l2(next, gb.len());
        let done = with_dec!(k, gb.as_ptr(), |d| {
            d.scales(st);
            for kb in 0..k.blocks() {
                let c = d.block(kb);
                for (j, cj) in c.iter().enumerate() {
                    _mm512_store_si512(st.codes[kb].as_mut_ptr().add(64 * j) as *mut __m512i, *cj);
                }
            }
        });
        if done.is_none() {
            decode_scalar(k, gb, st);
        }
    }
}

/// A whole row group (`grp`: its group-blocks back to back) for at most
/// [`VT`] vectors, the codes decoded in registers (no stage round trip) and
/// the accumulators kept in registers across the row: the decode path.
/// `st` receives the scales (and the codes, for types without a SIMD
/// decoder). The tile's prep words for 32-element block `kb` of the row are
/// at `pp[v * PREP + kb * bs]`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI available; `grp.len()` a multiple of
/// `k.group_block()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
    let stp: *mut Stage = st;
    // SAFETY: as `decode` for each group-block of `grp`; `tile` reads the
    // asserted prep words and writes `acc`; the stage is only reached
    // through `stp` while it runs.
    unsafe {
        let p = pp.as_ptr();
        let a = acc.as_mut_ptr();
        let done = with_dec!(k, grp.as_ptr(), |d| tiles(k, &d, stp, ngb, p, bs, a, n));
        if done.is_none() {
            for g in 0..ngb {
                decode_scalar(k, &grp[g * gbs..(g + 1) * gbs], &mut *stp);
                let pg = p.add(g * k.blocks() * bs);
                staged_tiles(k, stp, 1, pg, bs, a, n);
            }
        }
    }
}

/// [`tiles`] over `ngb` consecutive staged group-blocks from `st`, the
/// stage's kind picked at run time.
///
/// # Safety
/// As [`tile`]; `st` points to `ngb` stages.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn staged_tiles(
    k: &Kind,
    st: *mut Stage,
    ngb: usize,
    p: *const u32,
    bs: usize,
    a: *mut [f32; R],
    n: usize,
) {
    let gbs = k.group_block();
    // The tiles over the stages as a decoder of the kind's shape.
    macro_rules! go {
        ($s16:literal, $asym:literal, $one:literal) => {
            go!($s16, $asym, $one, false)
        };
        ($s16:literal, $asym:literal, $one:literal, $isc:literal) => {
            tiles(
                k,
                &Staged::<$s16, $asym, $one, $isc>(st, gbs),
                st,
                ngb,
                p,
                bs,
                a,
                n,
            )
        };
    }
    // SAFETY: per this fn's contract.
    unsafe {
        match (k.sub, k.asym, k.blocks() == 1) {
            (16, false, _) if k.iscale => go!(true, false, false, true),
            (16, false, _) => go!(true, false, false),
            (16, true, _) => go!(true, true, false),
            (_, false, false) if k.iscale => go!(false, false, false, true),
            (_, false, false) => go!(false, false, false),
            (_, false, true) => go!(false, false, true),
            (_, true, false) => go!(false, true, false),
            (_, true, true) => go!(false, true, true),
        }
    }
}

/// [`tile`] for `n ≤ VT` vectors, dispatched on the width (the kind is `D`'s).
///
/// # Safety
/// As [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tiles<D: Dec>(
    k: &Kind,
    d: &D,
    st: *mut Stage,
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
            8 => go!(8),
            7 => go!(7),
            6 => go!(6),
            5 => go!(5),
            4 => go!(4),
            3 => go!(3),
            2 => go!(2),
            1 => go!(1),
            _ => {}
        }
    }
}

/// Adds the contribution of the consecutive staged group-blocks `sts` to
/// the accumulators of one tile of `acc.len() <= VT` vectors: vector `v`'s
/// prep words for 32-element block `kb` (counted over `sts`) are at
/// `pp[v * PREP + kb * bs]`. Several group-blocks per call let one-block
/// kinds keep their accumulators in registers across them.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot(k: &Kind, sts: &mut [Stage], pp: &[u32], bs: usize, acc: &mut [[f32; R]]) {
    let n = acc.len();
    let nblk = sts.len() * k.blocks();
    assert!(n <= VT && (n == 0 || nblk == 0 || pp.len() >= (nblk - 1) * bs + n * PREP));
    // SAFETY: the asserted prep words and `acc`; the stages are only read.
    unsafe {
        let stp = sts.as_mut_ptr();
        staged_tiles(k, stp, sts.len(), pp.as_ptr(), bs, acc.as_mut_ptr(), n)
    }
}

#[inline(always)]
unsafe fn bi(p: *const u32, i: usize) -> __m512i {
    // SAFETY: the caller guarantees a readable word.
    unsafe { _mm512_set1_epi32(p.add(i).read() as i32) }
}

/// Word `i` at `p`, an f32, in every lane (also the AMX tile's).
#[inline(always)]
pub(super) unsafe fn bf(p: *const u32, i: usize) -> __m512 {
    // SAFETY: the caller guarantees a readable word.
    unsafe { _mm512_set1_ps(f32::from_bits(p.add(i).read())) }
}

/// `N` vectors over one stage: the canonical formula per (row lane, vector).
///
/// The integer sums of the `N` vectors are advanced together, one code word
/// at a time (`j` outer, vectors inner): consecutive `vpdpbusd`s belong to
/// different chains, so the scheduler always has ready ones without a deep
/// window (vector-major order, each vector's 8-long chain in turn, ran the
/// tile at ~60 % of the `vpdpbusd` rate). Integer sums are exact, so the
/// order does not change the bits. The accumulators of kinds with 256-element
/// ggml blocks stay in memory and take each ggml block's `fma(D_B, t, acc)`
/// there, leaving the registers to the sums; one-block kinds (`D::ONE`),
/// which take it every 32 elements, keep them in registers.
///
/// # Safety
/// As [`dot`], for `N` vectors at `p` (block stride `bs`) and accumulators at `a`.
#[inline(always)]
unsafe fn tile<const N: usize, D: Dec>(
    k: &Kind,
    d0: &D,
    st: *mut Stage,
    ngb: usize,
    p0: *const u32,
    bs: usize,
    a: *mut [f32; R],
) {
    // SAFETY: every read is inside the stage or the vectors' prep words for
    // blocks 0..k.blocks(); accumulators are N valid entries.
    unsafe {
        // One-block kinds: the accumulators in registers across the call.
        let mut accr = [_mm512_setzero_ps(); N];
        if D::ONE {
            for (v, x) in accr.iter_mut().enumerate() {
                *x = _mm512_loadu_ps((*a.add(v)).as_ptr());
            }
        }
        for g in 0..ngb {
            let d = d0.at(g * k.group_block());
            d.scales(st);
            let st: &Stage = &*d.stage(st);
            let p = p0.add(g * k.blocks() * bs);
            // The ggml block's sub-block sums, per vector (the formula's
            // `t`, or `T` for integer scales).
            let mut t = [_mm512_setzero_ps(); N];
            let mut ti = [_mm512_setzero_si512(); N];
            for kb in 0..k.blocks() {
                if !d.ptr().is_null() {
                    // The look-ahead spread over the blocks: a burst of a
                    // whole group-block's hints stalls on full miss buffers.
                    let gbs = k.group_block();
                    let part = gbs.div_ceil(64 * k.blocks()) * 64;
                    let from = (kb * part).min(gbs);
                    let len = part.min(gbs - from);
                    prefetch_l2(d.ptr().wrapping_add(PF_BYTES + from), len);
                }
                let c = d.block(kb);
                let q = |v: usize| p.add(v * PREP + kb * bs);
                // Per vector: the first half's (or the whole block's) sum
                // and the second half's (SUB16). Asymmetric kinds have OFF
                // 0: their sums start at zero.
                let mut i0 = [_mm512_setzero_si512(); N];
                let mut i1 = [_mm512_setzero_si512(); N];
                if !D::ASYM {
                    for (v, (a, b)) in i0.iter_mut().zip(&mut i1).enumerate() {
                        *a = bi(q(v), 9);
                        if D::SUB16 {
                            *b = bi(q(v), 10);
                        }
                    }
                }
                if D::SUB16 {
                    for j in 0..4 {
                        for (v, (a, b)) in i0.iter_mut().zip(&mut i1).enumerate() {
                            *a = _mm512_dpbusd_epi32(*a, c[j], bi(q(v), j));
                            *b = _mm512_dpbusd_epi32(*b, c[j + 4], bi(q(v), j + 4));
                        }
                    }
                    if D::ISCALE {
                        let c0 = _mm512_loadu_si512(st.iscales[2 * kb].as_ptr().cast());
                        let c1 = _mm512_loadu_si512(st.iscales[2 * kb + 1].as_ptr().cast());
                        for ((x, a), b) in ti.iter_mut().zip(&i0).zip(&i1) {
                            let y = _mm512_add_epi32(
                                _mm512_mullo_epi32(c0, *a),
                                _mm512_mullo_epi32(c1, *b),
                            );
                            *x = _mm512_add_epi32(*x, y);
                        }
                    } else {
                        let s0 = _mm512_loadu_ps(st.scales[2 * kb].as_ptr());
                        let s1 = _mm512_loadu_ps(st.scales[2 * kb + 1].as_ptr());
                        let m0 = _mm512_loadu_ps(st.mins[2 * kb].as_ptr());
                        let m1 = _mm512_loadu_ps(st.mins[2 * kb + 1].as_ptr());
                        for (v, ((x, a), b)) in t.iter_mut().zip(&i0).zip(&i1).enumerate() {
                            *x = _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(*a), *x);
                            if D::ASYM {
                                *x = _mm512_fmadd_ps(m0, bf(q(v), 11), *x);
                            }
                            *x = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(*b), *x);
                            if D::ASYM {
                                *x = _mm512_fmadd_ps(m1, bf(q(v), 12), *x);
                            }
                        }
                    }
                } else {
                    if D::ONE {
                        for (j, cj) in c.iter().enumerate() {
                            for (v, a) in i0.iter_mut().enumerate() {
                                *a = _mm512_dpbusd_epi32(*a, *cj, bi(q(v), j));
                            }
                        }
                    } else {
                        // Two chains per vector (even and odd code words), added
                        // before the scale: exact, and twice the sums in flight.
                        for j in (0..8).step_by(2) {
                            for (v, (a, b)) in i0.iter_mut().zip(&mut i1).enumerate() {
                                *a = _mm512_dpbusd_epi32(*a, c[j], bi(q(v), j));
                                *b = _mm512_dpbusd_epi32(*b, c[j + 1], bi(q(v), j + 1));
                            }
                        }
                    }
                    if D::ISCALE {
                        let c = _mm512_loadu_si512(st.iscales[kb].as_ptr().cast());
                        for ((x, a), b) in ti.iter_mut().zip(&i0).zip(&i1) {
                            let a = _mm512_add_epi32(*a, *b);
                            *x = _mm512_add_epi32(*x, _mm512_mullo_epi32(c, a));
                        }
                    } else {
                        let s = _mm512_loadu_ps(st.scales[kb].as_ptr());
                        let m = _mm512_loadu_ps(st.mins[kb].as_ptr());
                        for (v, ((x, a), b)) in t.iter_mut().zip(&i0).zip(&i1).enumerate() {
                            let a = _mm512_add_epi32(*a, *b);
                            *x = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(a), *x);
                            if D::ASYM {
                                *x = _mm512_fmadd_ps(m, bf(q(v), 11), *x);
                            }
                        }
                    }
                }
            }
            if D::ISCALE {
                let dd = _mm512_loadu_ps(st.d.as_ptr());
                for (x, i) in t.iter_mut().zip(&ti) {
                    *x = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(*i));
                }
            }
            // The block's activation scale, once per ggml block.
            for (v, t) in t.iter().enumerate() {
                if D::ONE {
                    accr[v] = _mm512_fmadd_ps(bf(p, v * PREP + 8), *t, accr[v]);
                } else {
                    let acc = (*a.add(v)).as_mut_ptr();
                    let x = _mm512_fmadd_ps(bf(p, v * PREP + 8), *t, _mm512_loadu_ps(acc));
                    _mm512_storeu_ps(acc, x);
                }
            }
        }
        if D::ONE {
            for (v, x) in accr.iter().enumerate() {
                _mm512_storeu_ps((*a.add(v)).as_mut_ptr(), *x);
            }
        }
    }
}
