//! ggml block decoding: the split of each ggml block into native codes,
//! scales and mins, and [`dequantize_ggml`].
//!
//! Block structs and formulas follow `ggml-common.h` / `ggml-quants.c`
//! (`dequantize_row_*`) and the `gguf` Python package (`gguf/quants.py`),
//! whose dequantizer the tests compare against bit for bit. For each type the
//! comment gives the byte layout, bits per weight, the ggml formula and the
//! native mapping. Scales are folded exactly as ggml computes them in f32
//! before the last multiply (see the crate docs, "Exactness").

use crate::layout::{native_layout_for, Layout};
use crate::{Error, GgmlType};
use half::{bf16, f16};

/// ggml `QK4_0`, `QK8_0`, … : elements per block of the 32-element types.
pub const QK: usize = 32;
/// ggml `QK_K`: elements per K-quant super-block.
pub const QK_K: usize = 256;

#[inline]
fn f16_at(b: &[u8], o: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
}

/// Q4_K/Q5_K 6-bit scale and min `j` (0..8) from the 12 packed bytes
/// (ggml `get_scale_min_k4`).
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 32 codes (each 0..=15) into 16 bytes in the native nibble order
/// (byte i = element i | element i+16 << 4).
#[inline]
fn pack_nibbles32(q: &[u8; 32], out: &mut [u8]) {
    for i in 0..16 {
        out[i] = q[i] | (q[i + 16] << 4);
    }
}

/// The integer sub-block scales of a Q6_K (int8) or IQ4_XS (6 bits less 32)
/// block into `sc`, and its f16 scale `d` as f32: the sub-block scale ggml
/// forms is `d * sc[j]` in f32. `None` for other types.
///
/// # Panics
/// If `blk` is shorter than one block or `sc` than its sub-blocks.
pub(crate) fn integer_scales(t: GgmlType, blk: &[u8], sc: &mut [i32]) -> Option<f32> {
    match t {
        // block_q6_K: scales (i8) @192, d @208.
        GgmlType::Q6_K => {
            for (j, s) in sc[..16].iter_mut().enumerate() {
                *s = i32::from(blk[192 + j] as i8);
            }
            Some(f16_at(blk, 208))
        }
        // block_iq4_xs: d @0, scales_h (u16) @2, scales_l @4. Sub-block j:
        // ls = (scales_l[j/2] >> 4*(j%2)) & 0xF | ((scales_h >> 2j) & 3) << 4.
        GgmlType::IQ4_XS => {
            let scales_h = u16::from_le_bytes([blk[2], blk[3]]);
            for (j, s) in sc[..8].iter_mut().enumerate() {
                let lo = (blk[4 + j / 2] >> (4 * (j % 2))) & 0xF;
                let hi = ((scales_h >> (2 * j)) & 3) as u8;
                *s = i32::from(lo | (hi << 4)) - 32;
            }
            Some(f16_at(blk, 0))
        }
        _ => None,
    }
}

/// Decodes one ggml block into the arrays of its [`block_layout`]: `codes`
/// receives the block's codes in that layout's encoding (`block_size` bytes
/// for I8 layouts, `block_size / 2` for I4), `scales` and `mins` one value per
/// group of the block (`mins` untouched for symmetric layouts).
///
/// # Panics
/// If `blk` or the outputs are shorter than one block needs, or `t` has no
/// [`block_layout`] (F32, F16, BF16 and the types gpack cannot decode).
pub(crate) fn decode_block(
    t: GgmlType,
    blk: &[u8],
    codes: &mut [u8],
    scales: &mut [f32],
    mins: &mut [f32],
) {
    use GgmlType as T;
    match t {
        // block_q8_0 { f16 d; i8 qs[32]; } 8.5 bpw. x = qs * d → I8Sym G32, s = d.
        T::Q8_0 => {
            scales[0] = f16_at(blk, 0);
            codes[..32].copy_from_slice(&blk[2..34]);
        }
        // block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; } 5.5 bpw.
        // x = (((qs nibble) | qh bit << 4) - 16) * d → I8Sym G32, q - 16.
        T::Q5_0 => {
            scales[0] = f16_at(blk, 0);
            let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            let qs = &blk[6..22];
            for i in 0..32 {
                let lo = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
                let hi = ((qh >> i) & 1) as u8;
                codes[i] = ((lo | (hi << 4)) as i8 - 16) as u8;
            }
        }
        // block_q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } 6 bpw.
        // x = q * d + m, q in 0..32 → I8Asym G32.
        T::Q5_1 => {
            scales[0] = f16_at(blk, 0);
            mins[0] = f16_at(blk, 2);
            let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
            let qs = &blk[8..24];
            for i in 0..32 {
                let lo = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
                let hi = ((qh >> i) & 1) as u8;
                codes[i] = lo | (hi << 4);
            }
        }
        // block_q4_0 { f16 d; u8 qs[16]; } 4.5 bpw. x = (q - 8) * d; nibble order
        // identical to native I4 → codes copied.
        T::Q4_0 => {
            scales[0] = f16_at(blk, 0);
            codes[..16].copy_from_slice(&blk[2..18]);
        }
        // block_q4_1 { f16 d; f16 m; u8 qs[16]; } 5 bpw. x = q * d + m.
        T::Q4_1 => {
            scales[0] = f16_at(blk, 0);
            mins[0] = f16_at(blk, 2);
            codes[..16].copy_from_slice(&blk[4..20]);
        }
        // block_q2_K { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; } 2.625 bpw.
        // Sub-block j of 16: dl = d * (sc & 0xF), ml = dmin * (sc >> 4),
        // x = dl * q - ml with q = (qs[h*32 + b] >> 2k) & 3 for element
        // e = h*128 + k*32 + b → I8Asym G16, s = dl, m = -ml.
        T::Q2_K => {
            let d = f16_at(blk, 80);
            let dmin = f16_at(blk, 82);
            for j in 0..16 {
                let sc = blk[j];
                scales[j] = d * f32::from(sc & 0xF);
                mins[j] = -(dmin * f32::from(sc >> 4));
            }
            let qs = &blk[16..80];
            for (e, c) in codes[..QK_K].iter_mut().enumerate() {
                let (h, k, b) = (e / 128, (e % 128) / 32, e % 32);
                *c = (qs[h * 32 + b] >> (2 * k)) & 3;
            }
        }
        // block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; } 3.4375 bpw.
        // 16 6-bit signed scales sc - 32; q = ((qs >> 2k) & 3) - (hmask bit ? 0 : 4);
        // x = (d * sc) * q → I8Sym G16, s = d * sc.
        T::Q3_K => {
            let hmask = &blk[0..32];
            let qs = &blk[32..96];
            let sc = &blk[96..108];
            let d = f16_at(blk, 108);
            for (i, s) in scales[..16].iter_mut().enumerate() {
                let lo = if i < 8 { sc[i] & 0xF } else { sc[i - 8] >> 4 };
                let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
                let v = (lo | (hi << 4)) as i8 - 32;
                *s = d * f32::from(v);
            }
            for (e, c) in codes[..QK_K].iter_mut().enumerate() {
                let (h, k, b) = (e / 128, (e % 128) / 32, e % 32);
                let ql = ((qs[h * 32 + b] >> (2 * k)) & 3) as i8;
                let hbit = (hmask[b] >> (e / 32)) & 1;
                *c = (ql - if hbit == 0 { 4 } else { 0 }) as u8;
            }
        }
        // block_q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } 4.5 bpw.
        // Sub-block j of 32: d1 = d * sc_j, m1 = dmin * m_j; x = d1 * q - m1;
        // qs[32c + b]: low nibble = element 64c + b, high = 64c + 32 + b
        // → I4Asym G32, s = d1, m = -m1, nibbles repacked to native order.
        T::Q4_K => {
            let d = f16_at(blk, 0);
            let dmin = f16_at(blk, 2);
            let sc = &blk[4..16];
            let qs = &blk[16..144];
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                scales[j] = d * f32::from(s);
                mins[j] = -(dmin * f32::from(m));
                let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                let shift = 4 * (j % 2);
                let mut q = [0u8; 32];
                for (b, v) in q.iter_mut().enumerate() {
                    *v = (chunk[b] >> shift) & 0xF;
                }
                pack_nibbles32(&q, &mut codes[16 * j..16 * j + 16]);
            }
        }
        // block_q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } 5.5 bpw.
        // As Q4_K plus a fifth bit: bit j of qh[b] for element 32j + b.
        // → I8Asym G32, s = d * sc, m = -(dmin * m).
        T::Q5_K => {
            let d = f16_at(blk, 0);
            let dmin = f16_at(blk, 2);
            let sc = &blk[4..16];
            let qh = &blk[16..48];
            let qs = &blk[48..176];
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                scales[j] = d * f32::from(s);
                mins[j] = -(dmin * f32::from(m));
                let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                let shift = 4 * (j % 2);
                for b in 0..32 {
                    let lo = (chunk[b] >> shift) & 0xF;
                    let hi = (qh[b] >> j) & 1;
                    codes[32 * j + b] = lo | (hi << 4);
                }
            }
        }
        // block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } 6.5625 bpw.
        // Element e = h*128 + r: ql nibble (ql[h*64 + r%64] >> 4*(r/64)), qh bits
        // (qh[h*32 + r%32] >> 2*(r/32)) & 3, q = (ql | qh << 4) - 32;
        // x = (d * sc[e/16]) * q → I8Sym G16, s = d * sc.
        T::Q6_K => {
            let ql = &blk[0..128];
            let qh = &blk[128..192];
            let mut sc = [0i32; 16];
            let d = integer_scales(t, blk, &mut sc).expect("Q6_K");
            for (s, &c) in scales[..16].iter_mut().zip(&sc) {
                *s = d * c as f32;
            }
            for (e, c) in codes[..QK_K].iter_mut().enumerate() {
                let (h, r) = (e / 128, e % 128);
                let lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
                let hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                *c = ((lo | (hi << 4)) as i8 - 32) as u8;
            }
        }
        // block_iq4_nl { f16 d; u8 qs[16]; } 4.5 bpw. x = d * kvalues_iq4nl[q];
        // low nibble of qs[i] = element i, high = element i + 16 (as Q4_0)
        // → I8Sym G32, code = the non-linear value itself, s = d.
        T::IQ4_NL => {
            scales[0] = f16_at(blk, 0);
            unpack_kvalues32(&KVALUES_IQ4NL, &blk[2..18], &mut codes[..32]);
        }
        // block_iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; } 4.25 bpw.
        // Sub-block j of 32: ls = (scales_l[j/2] >> 4*(j%2)) & 0xF
        // | ((scales_h >> 2j) & 3) << 4, dl = d * (ls - 32) (in f32, as ggml),
        // x = dl * kvalues_iq4nl[q]; qs[16j..16j+16] in IQ4_NL's nibble order
        // → I8Sym G32, code = the value, s = dl.
        T::IQ4_XS => {
            let mut sc = [0i32; 8];
            let d = integer_scales(t, blk, &mut sc).expect("IQ4_XS");
            let qs = &blk[8..136];
            for j in 0..8 {
                scales[j] = d * sc[j] as f32;
                unpack_kvalues32(
                    &KVALUES_IQ4NL,
                    &qs[16 * j..16 * j + 16],
                    &mut codes[32 * j..32 * j + 32],
                );
            }
        }
        // block_mxfp4 { u8 e; u8 qs[16]; } 4.25 bpw. e is an E8M0 exponent;
        // x = kvalues_mxfp4[q] * 2^(e - 128) (ggml's `e8m0_to_fp32_half`: the
        // e2m1 values are stored doubled, so the scale is halved); nibble
        // order as IQ4_NL → I8Sym G32, code = the doubled e2m1 value.
        T::MXFP4 => {
            scales[0] = e8m0_to_fp32_half(blk[0]);
            unpack_kvalues32(&KVALUES_MXFP4, &blk[1..17], &mut codes[..32]);
        }
        other => panic!("decode_block: {other} has no native block decoding"),
    }
}

/// ggml `kvalues_iq4nl`: the 16 non-linear levels of IQ4_NL and IQ4_XS.
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml `kvalues_mxfp4`: the e2m1 (FP4) values, doubled so they are integers.
pub(crate) const KVALUES_MXFP4: [i8; 16] =
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml `ggml_e8m0_to_fp32_half` (ggml-impl.h): `2^(e - 128)`, i.e. half the
/// E8M0 scale `2^(e - 127)`. `e` 0 and 1 give the f32 subnormals `2^-128` and
/// `2^-127`; 255 gives `2^127` (ggml does not treat 255 as NaN, nor do we).
#[inline]
fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Looks up the 32 nibbles of `qs` (byte i: element i low, element i + 16
/// high) in `table` and stores the values as `i8` bits.
#[inline]
fn unpack_kvalues32(table: &[i8; 16], qs: &[u8], out: &mut [u8]) {
    for i in 0..16 {
        out[i] = table[usize::from(qs[i] & 0xF)] as u8;
        out[i + 16] = table[usize::from(qs[i] >> 4)] as u8;
    }
}

/// The layout [`decode_block`] splits `t` into, `None` for types it cannot
/// decode. This is [`native_layout_for`] for the types with an exact native
/// layout, and I8Sym G32 for the non-linear 4-bit types (IQ4_NL, IQ4_XS,
/// MXFP4), whose table values are small integers and whose per-32 scale is
/// the f32 ggml multiplies them by, so `q * s` is ggml's value bit for bit
/// whatever layout the transcoder stores them in.
pub(crate) fn block_layout(t: GgmlType) -> Option<Layout> {
    use GgmlType as T;
    match t {
        T::IQ4_NL | T::IQ4_XS | T::MXFP4 => Some(Layout::I8Sym { group: 32 }),
        T::F32 | T::F16 | T::BF16 => None,
        _ => match native_layout_for(t) {
            Layout::Ggml(_) => None,
            l => Some(l),
        },
    }
}

/// Dequantizes one code of a native integer layout: the single definition of
/// the value formula shared by [`dequantize_ggml`] and
/// [`crate::NativeView::dequantize_row`].
#[inline(always)]
pub(crate) fn native_value(layout: Layout, code: u8, s: f32, m: f32) -> f32 {
    match layout {
        Layout::I8Sym { .. } => f32::from(code as i8) * s,
        Layout::I8Asym { .. } | Layout::I4Asym { .. } => f32::from(code) * s + m,
        Layout::I4Sym { .. } => f32::from(code as i8 - 8) * s,
        _ => unreachable!("native_value on a float layout"),
    }
}

/// Expands the native codes/scales/mins of `n` elements into f32.
pub(crate) fn expand_native(
    layout: Layout,
    codes: &[u8],
    scales: &[f32],
    mins: &[f32],
    out: &mut [f32],
) {
    let g = layout.group() as usize;
    let is4 = matches!(layout, Layout::I4Sym { .. } | Layout::I4Asym { .. });
    for (gi, chunk) in out.chunks_mut(g).enumerate() {
        let s = scales[gi];
        let m = if layout.has_mins() { mins[gi] } else { 0.0 };
        if is4 {
            let c = &codes[gi * 16..gi * 16 + 16];
            for i in 0..16 {
                chunk[i] = native_value(layout, c[i] & 0xF, s, m);
                chunk[i + 16] = native_value(layout, c[i] >> 4, s, m);
            }
        } else {
            let c = &codes[gi * g..gi * g + g];
            for (o, &q) in chunk.iter_mut().zip(c) {
                *o = native_value(layout, q, s, m);
            }
        }
    }
}

/// Whether [`dequantize_ggml`] supports `t`.
pub fn can_dequantize(t: GgmlType) -> bool {
    use GgmlType as T;
    matches!(
        t,
        T::F32
            | T::F16
            | T::BF16
            | T::Q4_0
            | T::Q4_1
            | T::Q5_0
            | T::Q5_1
            | T::Q8_0
            | T::Q2_K
            | T::Q3_K
            | T::Q4_K
            | T::Q5_K
            | T::Q6_K
            | T::IQ4_NL
            | T::IQ4_XS
            | T::MXFP4
    )
}

/// The types [`can_dequantize`] accepts, by name, comma-separated in id
/// order: for the error a loader gives when it refuses any other type.
pub fn decodable_type_names() -> String {
    GgmlType::ALL
        .iter()
        .filter(|&&t| can_dequantize(t))
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Dequantizes ggml data of type `t` into `out` (one f32 per element), bit for
/// bit as ggml's `dequantize_row_*` and `gguf.quants.dequantize` do.
///
/// `src` must hold exactly `out.len()` elements' worth of blocks. Supported:
/// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
/// IQ4_NL, IQ4_XS, MXFP4 ([`can_dequantize`]); any other type is
/// [`Error::Unsupported`].
pub fn dequantize_ggml(t: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), Error> {
    if !can_dequantize(t) {
        return Err(Error::Unsupported {
            what: "dequantize_ggml",
            name: t.name(),
        });
    }
    let n = out.len() as u64;
    let need = t.bytes_for(n).ok_or(Error::Shape {
        what: t.name(),
        rows: 1,
        cols: n,
    })?;
    if src.len() as u64 != need {
        return Err(Error::Truncated {
            what: "ggml data",
            needed: need,
            have: src.len() as u64,
        });
    }
    match t {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        _ => {
            let Some(layout) = block_layout(t) else {
                return Err(Error::Unsupported {
                    what: "dequantize_ggml",
                    name: t.name(),
                });
            };
            let (bs, ts) = t.block();
            let (bs, ts) = (bs as usize, ts as usize);
            let ng = bs / layout.group() as usize;
            let mut codes = [0u8; QK_K];
            let mut scales = [0f32; 16];
            let mut mins = [0f32; 16];
            for (blk, o) in src.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
                decode_block(t, blk, &mut codes, &mut scales[..ng], &mut mins[..ng]);
                expand_native(layout, &codes, &scales[..ng], &mins[..ng], o);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_matches_ggml_at_the_edges() {
        // ggml-impl.h: 0x00200000 << e for e < 2, (e - 1) << 23 otherwise.
        assert_eq!(e8m0_to_fp32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_fp32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_fp32_half(2), f32::MIN_POSITIVE);
        assert_eq!(e8m0_to_fp32_half(128), 1.0);
        assert_eq!(e8m0_to_fp32_half(254), 2f32.powi(126));
        assert_eq!(e8m0_to_fp32_half(255), 2f32.powi(127));
        for e in 1..=255u8 {
            assert_eq!(e8m0_to_fp32_half(e), 2.0 * e8m0_to_fp32_half(e - 1));
        }
    }

    #[test]
    fn nonlinear_types_split_into_i8sym_g32() {
        // The decoded codes are the table values and value = code * scale.
        let mut blk = [0u8; 18];
        blk[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        for (i, b) in blk[2..].iter_mut().enumerate() {
            *b = (i as u8) | ((15 - i as u8) << 4);
        }
        let (mut codes, mut s, mut m) = ([0u8; 32], [0f32; 1], [0f32; 1]);
        decode_block(GgmlType::IQ4_NL, &blk, &mut codes, &mut s, &mut m);
        assert_eq!(s[0], 0.5);
        for i in 0..16 {
            assert_eq!(codes[i] as i8, KVALUES_IQ4NL[i]);
            assert_eq!(codes[i + 16] as i8, KVALUES_IQ4NL[15 - i]);
        }
        for t in [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4] {
            assert_eq!(block_layout(t), Some(Layout::I8Sym { group: 32 }));
        }
        assert_eq!(block_layout(GgmlType::IQ2_XXS), None);
        assert_eq!(block_layout(GgmlType::F16), None);
    }
}
