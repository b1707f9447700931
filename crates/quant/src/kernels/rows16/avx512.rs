//! AVX-512 VNNI decoders (group-block → [`Stage`]) and dot loops for the
//! row-interleaved layouts. Every decoder writes the stage the scalar
//! decoder writes, bit for bit (tested per type), and the dot loops compute
//! the canonical formula of the parent module.

use super::{decode_scalar, Kind, Stage, PREP, R};
use crate::GgmlType;
use std::arch::x86_64::*;

/// Software prefetch distance (bytes of the stream, into L2).
pub(super) const PF_BYTES: usize = 8192;

/// Vectors per dot tile.
const VT: usize = 8;

/// Decodes the group-block `gb` of kind `k` into `st`, and prefetches the
/// group-block that starts at `next` (any address; prefetches do not fault).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI available; `gb.len() == k.group_block()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn decode(k: &Kind, gb: &[u8], st: &mut Stage, next: *const u8) {
    debug_assert_eq!(gb.len(), k.group_block());
    let mut o = 0;
    while o < gb.len() {
        _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(o) as *const i8);
        o += 64;
    }
    let p = gb.as_ptr();
    // SAFETY: each decoder reads only inside the group-block (its field
    // offsets are those of `interleave::fields`, scaled by 16) and writes
    // only the stage.
    unsafe {
        match k.t {
            GgmlType::Q8_0 => q8_0(p, st),
            GgmlType::Q4_0 => q4_0(p, st, false),
            GgmlType::Q4_1 => q4_0(p, st, true),
            GgmlType::Q4_K => q4_k(p, st, false),
            GgmlType::Q5_K => q4_k(p, st, true),
            GgmlType::Q6_K => q6_k(p, st),
            GgmlType::IQ4_NL => iq4_nl(p, st),
            GgmlType::IQ4_XS => iq4_xs(p, st),
            GgmlType::MXFP4 => mxfp4(p, st),
            _ => decode_scalar(k, gb, st),
        }
    }
}

#[inline(always)]
unsafe fn ld(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes.
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

#[inline(always)]
unsafe fn st_codes(st: &mut Stage, kb: usize, j: usize, v: __m512i) {
    // SAFETY: word j of block kb is 64 bytes inside the stage.
    unsafe { _mm512_store_si512(st.codes[kb].as_mut_ptr().add(64 * j) as *mut __m512i, v) }
}

#[inline(always)]
unsafe fn st_f32(dst: &mut [f32; R], v: __m512) {
    // SAFETY: 16 f32 in the stage array.
    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), v) }
}

/// 16 f16 values (32 bytes at `p`) as f32.
#[inline(always)]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// Q8_0: d @0 (16 × 2), qs @32 (8 words × 64). u = q ^ 0x80.
#[inline(always)]
unsafe fn q8_0(p: *const u8, st: &mut Stage) {
    // SAFETY: inside the 544-byte group-block.
    unsafe {
        st_f32(&mut st.scales[0], f16x16(p));
        let x80 = _mm512_set1_epi8(-128);
        for j in 0..8 {
            st_codes(st, 0, j, _mm512_xor_si512(ld(p.add(32 + 64 * j)), x80));
        }
    }
}

/// Q4_0 (d @0, qs @32) and Q4_1 (d @0, m @32, qs @64): the nibbles.
#[inline(always)]
unsafe fn q4_0(p: *const u8, st: &mut Stage, with_min: bool) {
    // SAFETY: inside the group-block (288 or 320 bytes).
    unsafe {
        st_f32(&mut st.scales[0], f16x16(p));
        let qs = if with_min {
            st_f32(&mut st.mins[0], f16x16(p.add(32)));
            p.add(64)
        } else {
            p.add(32)
        };
        let nib = _mm512_set1_epi8(0x0F);
        for j in 0..4 {
            let w = ld(qs.add(64 * j));
            st_codes(st, 0, j, _mm512_and_si512(w, nib));
            st_codes(
                st,
                0,
                j + 4,
                _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib),
            );
        }
    }
}

/// Q4_K: d @0, dmin @32, scales @64 (3 words), qs @256 (32 words).
/// Q5_K: the same, qh @256 (8 words), qs @768.
#[inline(always)]
unsafe fn q4_k(p: *const u8, st: &mut Stage, q5: bool) {
    // SAFETY: inside the group-block (2304 or 2816 bytes).
    unsafe {
        let d = f16x16(p);
        let dmin = f16x16(p.add(32));
        let w0 = ld(p.add(64));
        let w1 = ld(p.add(128));
        let w2 = ld(p.add(192));
        let m6 = _mm512_set1_epi32(63);
        let m4 = _mm512_set1_epi32(15);
        let m2 = _mm512_set1_epi32(3);
        let sign = _mm512_set1_ps(-0.0);
        // ggml get_scale_min_k4, one 32-bit lane per row.
        for j in 0..8 {
            let (sc, mn) = if j < 4 {
                let s =
                    _mm512_and_si512(_mm512_srlv_epi32(w0, _mm512_set1_epi32(8 * j as i32)), m6);
                let m =
                    _mm512_and_si512(_mm512_srlv_epi32(w1, _mm512_set1_epi32(8 * j as i32)), m6);
                (s, m)
            } else {
                let t = 8 * (j as u32 - 4);
                let lo = _mm512_srlv_epi32(w2, _mm512_set1_epi32(t as i32));
                let h0 =
                    _mm512_and_si512(_mm512_srlv_epi32(w0, _mm512_set1_epi32(t as i32 + 6)), m2);
                let h1 =
                    _mm512_and_si512(_mm512_srlv_epi32(w1, _mm512_set1_epi32(t as i32 + 6)), m2);
                let s = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi32::<4>(h0));
                let m = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32::<4>(lo), m4),
                    _mm512_slli_epi32::<4>(h1),
                );
                (s, m)
            };
            st_f32(&mut st.scales[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
            let mm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
            st_f32(&mut st.mins[j], _mm512_xor_ps(mm, sign));
        }
        let nib = _mm512_set1_epi8(0x0F);
        let one = _mm512_set1_epi8(1);
        let (qh, qs) = if q5 {
            (p.add(256), p.add(768))
        } else {
            (p, p.add(256))
        };
        for kb in 0..8 {
            let c = kb / 2;
            for j in 0..8 {
                let w = ld(qs.add(64 * (8 * c + j)));
                let w = if kb % 2 == 1 {
                    _mm512_srli_epi16::<4>(w)
                } else {
                    w
                };
                let mut u = _mm512_and_si512(w, nib);
                if q5 {
                    let h = _mm512_srlv_epi16(ld(qh.add(64 * j)), _mm512_set1_epi16(kb as i16));
                    let h = _mm512_slli_epi16::<4>(_mm512_and_si512(h, one));
                    u = _mm512_or_si512(u, h);
                }
                st_codes(st, kb, j, u);
            }
        }
    }
}

/// Q6_K: ql @0 (32 words), qh @2048 (16 words), scales @3072 (4 words),
/// d @3328. u = ql nibble | qh 2 bits << 4 (= q, OFF 32).
#[inline(always)]
unsafe fn q6_k(p: *const u8, st: &mut Stage) {
    // SAFETY: inside the 3360-byte group-block.
    unsafe {
        let d = f16x16(p.add(3328));
        for w in 0..4 {
            let sw = ld(p.add(3072 + 64 * w));
            for t in 0..4 {
                // Signed byte t of each lane.
                let s = _mm512_srai_epi32::<24>(_mm512_sllv_epi32(
                    sw,
                    _mm512_set1_epi32(24 - 8 * t as i32),
                ));
                st_f32(
                    &mut st.scales[4 * w + t],
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(s)),
                );
            }
        }
        let nib = _mm512_set1_epi8(0x0F);
        let three = _mm512_set1_epi8(3);
        for kb in 0..8 {
            let (hh, q) = (kb / 4, kb % 4);
            for j in 0..8 {
                let l = ld(p.add(64 * (16 * hh + 8 * (q % 2) + j)));
                let l = if q >= 2 { _mm512_srli_epi16::<4>(l) } else { l };
                let lo = _mm512_and_si512(l, nib);
                let h = ld(p.add(2048 + 64 * (8 * hh + j)));
                let h =
                    _mm512_and_si512(_mm512_srlv_epi16(h, _mm512_set1_epi16(2 * q as i16)), three);
                st_codes(st, kb, j, _mm512_or_si512(lo, _mm512_slli_epi16::<4>(h)));
            }
        }
    }
}

/// Adds the stage's contribution to the accumulators of `acc.len()`
/// vectors; vector `v`'s prep words for this group-block start at
/// `pp[v * stride]`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI available; `pp` holds `acc.len()` vectors' words
/// at that stride for `k.blocks()` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot(k: &Kind, st: &Stage, pp: &[u32], stride: usize, acc: &mut [[f32; R]]) {
    let n = acc.len();
    assert!(n == 0 || pp.len() >= (n - 1) * stride + k.blocks() * PREP);
    let mut v = 0;
    while v < n {
        let nv = VT.min(n - v);
        // SAFETY: vectors v..v + nv are inside `acc` and (asserted) `pp`.
        unsafe {
            let p = pp.as_ptr().add(v * stride);
            let a = acc.as_mut_ptr().add(v);
            macro_rules! go {
                ($n:expr) => {
                    match (k.sub, k.asym) {
                        (16, false) => tile::<{ $n }, true, false>(k, st, p, stride, a),
                        (16, true) => tile::<{ $n }, true, true>(k, st, p, stride, a),
                        (_, false) => tile::<{ $n }, false, false>(k, st, p, stride, a),
                        (_, true) => tile::<{ $n }, false, true>(k, st, p, stride, a),
                    }
                };
            }
            match nv {
                8 => go!(8),
                7 => go!(7),
                6 => go!(6),
                5 => go!(5),
                4 => go!(4),
                3 => go!(3),
                2 => go!(2),
                _ => go!(1),
            }
        }
        v += nv;
    }
}

#[inline(always)]
unsafe fn bi(p: *const u32, i: usize) -> __m512i {
    // SAFETY: the caller guarantees a readable word.
    unsafe { _mm512_set1_epi32(p.add(i).read() as i32) }
}

#[inline(always)]
unsafe fn bf(p: *const u32, i: usize) -> __m512 {
    // SAFETY: the caller guarantees a readable word.
    unsafe { _mm512_set1_ps(f32::from_bits(p.add(i).read())) }
}

/// `N` vectors over one stage: the canonical formula per (row lane, vector).
///
/// # Safety
/// As [`dot`], for `N` vectors at `p` (stride `stride`) and accumulators at `a`.
#[inline(always)]
unsafe fn tile<const N: usize, const SUB16: bool, const ASYM: bool>(
    k: &Kind,
    st: &Stage,
    p: *const u32,
    stride: usize,
    a: *mut [f32; R],
) {
    // SAFETY: every read is inside the stage or the vectors' prep words for
    // blocks 0..k.blocks(); accumulators are N valid entries.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); N];
        for (i, x) in acc.iter_mut().enumerate() {
            *x = _mm512_loadu_ps((*a.add(i)).as_ptr());
        }
        for kb in 0..k.blocks() {
            let cp = st.codes[kb].as_ptr();
            let mut c = [_mm512_setzero_si512(); 8];
            for (j, cj) in c.iter_mut().enumerate() {
                *cj = _mm512_load_si512(cp.add(64 * j) as *const __m512i);
            }
            if SUB16 {
                let s0 = _mm512_loadu_ps(st.scales[2 * kb].as_ptr());
                let s1 = _mm512_loadu_ps(st.scales[2 * kb + 1].as_ptr());
                let (m0, m1) = if ASYM {
                    (
                        _mm512_loadu_ps(st.mins[2 * kb].as_ptr()),
                        _mm512_loadu_ps(st.mins[2 * kb + 1].as_ptr()),
                    )
                } else {
                    (_mm512_setzero_ps(), _mm512_setzero_ps())
                };
                for (v, x) in acc.iter_mut().enumerate() {
                    let q = p.add(v * stride + kb * PREP);
                    let mut i0 = bi(q, 9);
                    let mut i1 = bi(q, 10);
                    for j in 0..4 {
                        i0 = _mm512_dpbusd_epi32(i0, c[j], bi(q, j));
                        i1 = _mm512_dpbusd_epi32(i1, c[j + 4], bi(q, j + 4));
                    }
                    let d = bf(q, 8);
                    *x = _mm512_fmadd_ps(_mm512_mul_ps(s0, d), _mm512_cvtepi32_ps(i0), *x);
                    if ASYM {
                        *x = _mm512_fmadd_ps(m0, bf(q, 11), *x);
                    }
                    *x = _mm512_fmadd_ps(_mm512_mul_ps(s1, d), _mm512_cvtepi32_ps(i1), *x);
                    if ASYM {
                        *x = _mm512_fmadd_ps(m1, bf(q, 12), *x);
                    }
                }
            } else {
                let s = _mm512_loadu_ps(st.scales[kb].as_ptr());
                let m = if ASYM {
                    _mm512_loadu_ps(st.mins[kb].as_ptr())
                } else {
                    _mm512_setzero_ps()
                };
                for (v, x) in acc.iter_mut().enumerate() {
                    let q = p.add(v * stride + kb * PREP);
                    let mut i0 = bi(q, 9);
                    for (j, cj) in c.iter().enumerate() {
                        i0 = _mm512_dpbusd_epi32(i0, *cj, bi(q, j));
                    }
                    *x = _mm512_fmadd_ps(_mm512_mul_ps(s, bf(q, 8)), _mm512_cvtepi32_ps(i0), *x);
                    if ASYM {
                        *x = _mm512_fmadd_ps(m, bf(q, 11), *x);
                    }
                }
            }
        }
        for (i, x) in acc.iter().enumerate() {
            _mm512_storeu_ps((*a.add(i)).as_mut_ptr(), *x);
        }
    }
}

/// ggml `kvalues_iq4nl` + 128, as the unsigned codes (OFF 128), replicated
/// per 128-bit lane for `vpshufb`.
const LUT_IQ4NL: [u8; 16] = [
    1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241,
];
/// ggml `kvalues_mxfp4` (doubled e2m1 values) + 128.
const LUT_MXFP4: [u8; 16] = [
    128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116,
];

#[inline(always)]
unsafe fn lut(t: &[u8; 16]) -> __m512i {
    // SAFETY: 16 readable bytes.
    unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr() as *const __m128i)) }
}

/// 32 elements from 4 nibble words at `qs` (IQ4_NL/MXFP4/IQ4_XS order: byte
/// i low nibble = element i, high nibble = element i + 16) through `table`,
/// into block `kb` of the stage.
#[inline(always)]
unsafe fn lut_block(qs: *const u8, table: __m512i, st: &mut Stage, kb: usize) {
    // SAFETY: 4 words at `qs` inside the group-block; block kb in the stage.
    unsafe {
        let nib = _mm512_set1_epi8(0x0F);
        for j in 0..4 {
            let w = ld(qs.add(64 * j));
            let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(w, nib));
            let hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(w), nib));
            st_codes(st, kb, j, lo);
            st_codes(st, kb, j + 4, hi);
        }
    }
}

/// IQ4_NL: d @0, qs @32.
#[inline(always)]
unsafe fn iq4_nl(p: *const u8, st: &mut Stage) {
    // SAFETY: inside the 288-byte group-block.
    unsafe {
        st_f32(&mut st.scales[0], f16x16(p));
        lut_block(p.add(32), lut(&LUT_IQ4NL), st, 0);
    }
}

/// IQ4_XS: d @0, scales_h @32 (16 × u16), scales_l @64 (one word), qs @128.
#[inline(always)]
unsafe fn iq4_xs(p: *const u8, st: &mut Stage) {
    // SAFETY: inside the 2176-byte group-block.
    unsafe {
        let d = f16x16(p);
        let sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.add(32) as *const __m256i));
        let sl = ld(p.add(64));
        let m4 = _mm512_set1_epi32(15);
        let m2 = _mm512_set1_epi32(3);
        let c32 = _mm512_set1_epi32(32);
        let table = lut(&LUT_IQ4NL);
        for j in 0..8 {
            let lo = _mm512_and_si512(_mm512_srlv_epi32(sl, _mm512_set1_epi32(4 * j as i32)), m4);
            let hi = _mm512_and_si512(_mm512_srlv_epi32(sh, _mm512_set1_epi32(2 * j as i32)), m2);
            let ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)), c32);
            st_f32(&mut st.scales[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls)));
            lut_block(p.add(128 + 64 * 4 * j), table, st, j);
        }
    }
}

/// MXFP4: e @0 (16 bytes), qs @16; scale = ggml's `e8m0_to_fp32_half`.
#[inline(always)]
unsafe fn mxfp4(p: *const u8, st: &mut Stage) {
    // SAFETY: inside the 272-byte group-block.
    unsafe {
        let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i));
        let big = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let small = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let lt2 = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        let bits = _mm512_mask_blend_epi32(lt2, big, small);
        st_f32(&mut st.scales[0], _mm512_castsi512_ps(bits));
        lut_block(p.add(16), lut(&LUT_MXFP4), st, 0);
    }
}
