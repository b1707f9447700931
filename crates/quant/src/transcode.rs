//! Streaming writers of native tensors: [`transcode`] (ggml → native, exact)
//! and [`quantize`] (F32/F16/BF16 → int8/int4).
//!
//! Both write the header, then the codes row by row, then the scales (and
//! mins), so memory stays O(one row) for [`transcode`]: the source is usually
//! a mapping, and decoding a block twice (once for its codes, once for its
//! scales) is cheaper than buffering a tensor's scales. [`quantize`] does the
//! expensive per-group search once and buffers only the scales/mins
//! (1/8 of the f32 input).

use crate::ggml::{decode_block, native_value};
use crate::layout::{native_layout_for, Layout, NativeTensorHeader};
use crate::{mul, to_usize, Error, GgmlType};
use half::{bf16, f16};
use std::io::Write;

const ZEROS: [u8; 16] = [0; 16];

fn pad_to(w: &mut impl Write, written: &mut u64, off: u64) -> Result<(), Error> {
    if off == 0 {
        return Ok(());
    }
    let pad = (off - *written) as usize;
    w.write_all(&ZEROS[..pad])?;
    *written = off;
    Ok(())
}

fn check_src(t: GgmlType, src: &[u8], rows: u64, cols: u64) -> Result<u64, Error> {
    let row_bytes = t.bytes_for(cols).ok_or(Error::Shape {
        what: t.name(),
        rows,
        cols,
    })?;
    let need = mul(row_bytes, rows, "source length")?;
    if src.len() as u64 != need {
        return Err(Error::Truncated {
            what: "source tensor",
            needed: need,
            have: src.len() as u64,
        });
    }
    Ok(row_bytes)
}

fn f32s_as_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Writes one native tensor (header included) holding `rows x cols` elements
/// of ggml type `src_type` from `src`, in [`native_layout_for`]`(src_type)`.
/// Returns the bytes written (= [`crate::encoded_len`]).
///
/// Dequantizing the result gives the same f32 bits as dequantizing `src` with
/// ggml. Types without an exact native layout are written as [`Layout::Ggml`]
/// (the blocks unchanged).
pub fn transcode(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let layout = native_layout_for(src_type);
    let row_bytes = to_usize(check_src(src_type, src, rows, cols)?, "row bytes")?;
    let (h, total) = NativeTensorHeader::new(layout, rows, cols, false)?;
    w.write_all(&h.to_bytes())?;
    let mut written = 64u64;
    if !layout.has_scales() {
        w.write_all(src)?;
        return Ok(total);
    }
    let (bs, ts) = src_type.block();
    let (bs, ts) = (bs as usize, ts as usize);
    let cols_us = to_usize(cols, "cols")?;
    let g = layout.group() as usize;
    let groups_per_block = bs / g;
    let codes_per_block = if matches!(layout, Layout::I4Sym { .. } | Layout::I4Asym { .. }) {
        bs / 2
    } else {
        bs
    };
    let blocks_per_row = cols_us / bs;
    let mut codes = vec![0u8; codes_per_block * blocks_per_row];
    let mut scales = vec![0f32; groups_per_block * blocks_per_row];
    let mut mins = vec![0f32; groups_per_block * blocks_per_row];
    let decode_row = |row: &[u8], codes: &mut [u8], scales: &mut [f32], mins: &mut [f32]| {
        for (b, blk) in row.chunks_exact(ts).enumerate() {
            decode_block(
                src_type,
                blk,
                &mut codes[b * codes_per_block..(b + 1) * codes_per_block],
                &mut scales[b * groups_per_block..(b + 1) * groups_per_block],
                &mut mins[b * groups_per_block..(b + 1) * groups_per_block],
            );
        }
    };
    // Pass 1: codes.
    for row in src.chunks_exact(row_bytes) {
        decode_row(row, &mut codes, &mut scales, &mut mins);
        w.write_all(&codes)?;
        written += codes.len() as u64;
    }
    // Pass 2: scales; pass 3: mins.
    for (off, want_mins) in [(h.scales_off, false), (h.mins_off, true)] {
        if off == 0 {
            continue;
        }
        pad_to(w, &mut written, off)?;
        for row in src.chunks_exact(row_bytes) {
            decode_row(row, &mut codes, &mut scales, &mut mins);
            let a = if want_mins { &mins } else { &scales };
            w.write_all(f32s_as_bytes(a))?;
            written += (a.len() * 4) as u64;
        }
    }
    debug_assert_eq!(written, total);
    Ok(total)
}

/// Converts one row of F32/F16/BF16 source bytes to f32.
pub(crate) fn row_to_f32(t: GgmlType, src: &[u8], out: &mut [f32]) {
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
        _ => unreachable!("row_to_f32 on {t}"),
    }
}

/// Writes one native tensor in `target` (I8Sym G32, I4Sym G32 or I4Asym G32)
/// quantized from `rows x cols` F32/F16/BF16 values. Returns the bytes written.
///
/// Each group gets the candidate (scale, min, codes) with the smallest squared
/// error among: ggml's own choice for Q8_0 / Q4_0 / Q4_1 (with its f16-rounded
/// scale), the same with an f32 scale, a scan of scales around it, and a
/// least-squares refit of each; so the error is never above what ggml's
/// quantizer reaches on the same group.
pub fn quantize(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: Layout,
    w: &mut impl Write,
) -> Result<u64, Error> {
    if !matches!(src_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return Err(Error::Unsupported {
            what: "quantize source",
            name: src_type.name(),
        });
    }
    if !matches!(
        target,
        Layout::I8Sym { group: 32 } | Layout::I4Sym { group: 32 } | Layout::I4Asym { group: 32 }
    ) {
        return Err(Error::Unsupported {
            what: "quantize target",
            name: target.name(),
        });
    }
    let row_bytes = to_usize(check_src(src_type, src, rows, cols)?, "row bytes")?;
    let (h, total) = NativeTensorHeader::new(target, rows, cols, false)?;
    w.write_all(&h.to_bytes())?;
    let mut written = 64u64;
    let cols_us = to_usize(cols, "cols")?;
    let ng = cols_us / 32;
    let is4 = !matches!(target, Layout::I8Sym { .. });
    let mut x = vec![0f32; cols_us];
    let mut codes = vec![0u8; if is4 { cols_us / 2 } else { cols_us }];
    let n_groups = to_usize(mul(rows, ng as u64, "group count")?, "group count")?;
    let mut scales = Vec::with_capacity(n_groups);
    let mut mins = Vec::with_capacity(if target.has_mins() { n_groups } else { 0 });
    for row in src.chunks_exact(row_bytes) {
        row_to_f32(src_type, row, &mut x);
        for (gi, xg) in x.chunks_exact(32).enumerate() {
            let xg: &[f32; 32] = xg.try_into().expect("chunk of 32");
            let (q, s, m) = match target {
                Layout::I8Sym { .. } => quantize_group_i8sym(xg),
                Layout::I4Sym { .. } => quantize_group_i4sym(xg),
                _ => quantize_group_i4asym(xg),
            };
            if is4 {
                let c = &mut codes[gi * 16..gi * 16 + 16];
                for i in 0..16 {
                    c[i] = q[i] | (q[i + 16] << 4);
                }
            } else {
                codes[gi * 32..gi * 32 + 32].copy_from_slice(&q);
            }
            scales.push(s);
            if target.has_mins() {
                mins.push(m);
            }
        }
        w.write_all(&codes)?;
        written += codes.len() as u64;
    }
    pad_to(w, &mut written, h.scales_off)?;
    w.write_all(f32s_as_bytes(&scales))?;
    written += scales.len() as u64 * 4;
    if h.mins_off != 0 {
        pad_to(w, &mut written, h.mins_off)?;
        w.write_all(f32s_as_bytes(&mins))?;
        written += mins.len() as u64 * 4;
    }
    debug_assert_eq!(written, total);
    Ok(total)
}

/// Squared error of codes `q` with scale/min under `layout`'s value formula.
fn sse(layout: Layout, x: &[f32; 32], q: &[u8; 32], s: f32, m: f32) -> f64 {
    let mut e = 0f64;
    for i in 0..32 {
        let d = f64::from(native_value(layout, q[i], s, m)) - f64::from(x[i]);
        e += d * d;
    }
    e
}

/// C `roundf`: half away from zero.
#[inline]
fn roundf(v: f32) -> f32 {
    v.round()
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

struct Best {
    q: [u8; 32],
    s: f32,
    m: f32,
    err: f64,
}

impl Best {
    fn new() -> Self {
        Best {
            q: [0; 32],
            s: 0.0,
            m: 0.0,
            err: f64::INFINITY,
        }
    }
    fn offer(&mut self, layout: Layout, x: &[f32; 32], q: [u8; 32], s: f32, m: f32) {
        if !s.is_finite() || !m.is_finite() {
            return;
        }
        let e = sse(layout, x, &q, s, m);
        if e < self.err {
            *self = Best { q, s, m, err: e };
        }
    }
}

fn quantize_group_i8sym(x: &[f32; 32]) -> ([u8; 32], f32, f32) {
    let l = Layout::I8Sym { group: 32 };
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let mut best = Best::new();
    if amax == 0.0 {
        return ([0; 32], 0.0, 0.0);
    }
    // ggml quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)), stored f16(d).
    let d = amax / 127.0;
    let id = 1.0 / d;
    let mut q = [0u8; 32];
    for i in 0..32 {
        q[i] = (roundf(x[i] * id).clamp(-127.0, 127.0) as i8) as u8;
    }
    best.offer(l, x, q, f16_round(d), 0.0);
    best.offer(l, x, q, d, 0.0);
    // Least-squares scale for these codes, then re-round.
    let (mut sxq, mut sqq) = (0f64, 0f64);
    for i in 0..32 {
        let qi = f64::from(q[i] as i8);
        sxq += qi * f64::from(x[i]);
        sqq += qi * qi;
    }
    if sqq > 0.0 {
        let s = (sxq / sqq) as f32;
        best.offer(l, x, q, s, 0.0);
        let mut q2 = [0u8; 32];
        for i in 0..32 {
            q2[i] = (roundf(x[i] / s).clamp(-127.0, 127.0) as i8) as u8;
        }
        best.offer(l, x, q2, s, 0.0);
    }
    (best.q, best.s, 0.0)
}

fn quantize_group_i4sym(x: &[f32; 32]) -> ([u8; 32], f32, f32) {
    let l = Layout::I4Sym { group: 32 };
    // The signed value of largest magnitude (ggml quantize_row_q4_0_ref).
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return ([8; 32], 0.0, 0.0);
    }
    let mut best = Best::new();
    // ggml: d = max / -8, q = min(15, (i8)(x * id + 8.5)).
    let d = max / -8.0;
    let id = 1.0 / d;
    let mut q = [0u8; 32];
    for i in 0..32 {
        q[i] = ((x[i] * id + 8.5) as i8).clamp(0, 15) as u8;
    }
    best.offer(l, x, q, f16_round(d), 0.0);
    best.offer(l, x, q, d, 0.0);
    // Scan scales around it (like ggml's make_qx_quants), each with a
    // least-squares refit.
    for step in -10..=10 {
        let s0 = max / (-8.0 + 0.1 * step as f32);
        for flip in [1.0f32, -1.0] {
            let s = s0 * flip;
            if s == 0.0 || !s.is_finite() {
                continue;
            }
            let mut q = [0u8; 32];
            let (mut sxq, mut sqq) = (0f64, 0f64);
            for i in 0..32 {
                let v = roundf(x[i] / s).clamp(-8.0, 7.0);
                q[i] = (v as i8 + 8) as u8;
                sxq += f64::from(v) * f64::from(x[i]);
                sqq += f64::from(v) * f64::from(v);
            }
            best.offer(l, x, q, s, 0.0);
            if sqq > 0.0 {
                best.offer(l, x, q, (sxq / sqq) as f32, 0.0);
            }
        }
    }
    (best.q, best.s, 0.0)
}

fn quantize_group_i4asym(x: &[f32; 32]) -> ([u8; 32], f32, f32) {
    let l = Layout::I4Asym { group: 32 };
    let mut min = f32::INFINITY;
    let mut max = f32::NEG_INFINITY;
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let mut best = Best::new();
    // ggml quantize_row_q4_1_ref: d = (max - min)/15, q = min(15, (i8)((x - min) * id + 0.5)).
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (qi, &xi) in q.iter_mut().zip(x) {
        *qi = (((xi - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    }
    best.offer(l, x, q, f16_round(d), f16_round(min));
    best.offer(l, x, q, d, min);
    if d == 0.0 {
        return (best.q, best.s, best.m);
    }
    // Alternate a least-squares fit of (s, m) for fixed codes and re-rounding.
    for _ in 0..4 {
        let (mut sq, mut sqq, mut sx, mut sxq) = (0f64, 0f64, 0f64, 0f64);
        for i in 0..32 {
            let qi = f64::from(q[i]);
            let xi = f64::from(x[i]);
            sq += qi;
            sqq += qi * qi;
            sx += xi;
            sxq += xi * qi;
        }
        let det = 32.0 * sqq - sq * sq;
        if det <= 0.0 {
            break;
        }
        let s = ((32.0 * sxq - sq * sx) / det) as f32;
        let m = ((sqq * sx - sq * sxq) / det) as f32;
        best.offer(l, x, q, s, m);
        if s == 0.0 {
            break;
        }
        for i in 0..32 {
            q[i] = roundf((x[i] - m) / s).clamp(0.0, 15.0) as u8;
        }
        best.offer(l, x, q, s, m);
    }
    (best.q, best.s, best.m)
}
