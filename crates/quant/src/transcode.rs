//! Streaming writers of native tensors: [`transcode`] (ggml → native, exact),
//! [`transcode_canonical`] (into the one layout policy,
//! [`canonical_layout_for`]) and [`quantize`] (F32/F16/BF16 → int8/int4, or
//! any decodable ggml type: re-quantization).
//!
//! [`canonical_layout_for`] is here rather than in [`crate::layout`] because
//! it depends on what [`crate::ggml`] decodes, and `ggml` builds on `layout`:
//! so the modules use each other one way.
//!
//! Both write the header, then the codes row by row, then the scales (and
//! mins), so memory stays O(one row) for [`transcode`]: the source is usually
//! a mapping, and decoding a block twice (once for its codes, once for its
//! scales) is cheaper than buffering a tensor's scales. [`quantize`] does the
//! expensive per-group search once and buffers only the scales/mins
//! (1/8 of the f32 input) and one chunk of codes; a ggml block source is
//! dequantized one row at a time inside the per-row worker (ggml blocks never
//! straddle rows, and groups are quantized independently), so re-quantizing
//! never holds more than a row of f32 per thread. The whole-tensor f32 buffer
//! it replaces cost 8 bytes per weight (f32 values plus their byte copy).

use crate::ggml::{decode_block, native_value};
use crate::layout::{native_layout_for, Layout, NativeTensorHeader};
use crate::{mul, to_usize, Error, GgmlType};
use half::{bf16, f16};
use rayon::prelude::*;
use std::io::Write;

const ZEROS: [u8; 16] = [0; 16];

/// Codes quantized per parallel chunk by [`quantize`].
const CHUNK_BYTES: usize = 4 << 20;

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
    transcode_impl(src_type, src, rows, cols, false, w)
}

/// The canonical layout of a ggml type in a `.gpack` and in the runtime's
/// transcodes of GGUF/HF sources (the one layout policy): quantized types
/// row-interleaved by 16 ([`Layout::Rows16`], ggml's bytes, so never larger
/// than the GGUF), F32/F16/BF16 as themselves, anything else as raw ggml
/// blocks ([`Layout::Ggml`]; refused by the kernels unless it decodes).
/// Embeddings are interleaved too (a lookup gathers one row's blocks from 16
/// rows' bytes; a tied embedding is also the head, a matmul).
pub fn canonical_layout_for(t: GgmlType, cols: u64) -> Layout {
    if crate::interleave::supports(t)
        && crate::ggml::can_dequantize(t)
        && cols.is_multiple_of(t.block().0)
    {
        Layout::Rows16(t)
    } else {
        native_layout_for(t)
    }
}

/// Writes a native tensor of `rows × cols` elements of ggml type `src_type`
/// in its canonical layout ([`canonical_layout_for`]: row-interleaved
/// ggml blocks for the quantized types, else as [`transcode`]). Bounded
/// memory: 16 rows at a time. Returns the bytes written.
pub fn transcode_canonical(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    w: &mut impl Write,
) -> Result<u64, Error> {
    match canonical_layout_for(src_type, cols) {
        Layout::Rows16(t) => {
            let (h, total) = NativeTensorHeader::new(Layout::Rows16(t), rows, cols, false)?;
            w.write_all(&h.to_bytes())?;
            crate::interleave::write_interleaved(t, src, rows, cols, w)?;
            Ok(total)
        }
        _ => transcode(src_type, src, rows, cols, w),
    }
}

/// Whether every scale and min [`transcode`] produces from `t` is exactly
/// representable in f16 (they are the blocks' own f16 fields): Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0.
pub fn f16_scales_exact_for(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
    )
}

/// [`transcode`] plus the exact f16 copy of the scales and mins (header flag
/// bit 0), which the kernels then read instead of the f32 arrays (Q4_1: 20
/// bytes per 32 weights streamed, as in the GGUF, instead of 24). Only for
/// the types of [`f16_scales_exact_for`]; others fail with
/// [`Error::Unsupported`]. The length is
/// `NativeTensorHeader::new(layout, rows, cols, true)?.1`.
pub fn transcode_with_f16_scales(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    w: &mut impl Write,
) -> Result<u64, Error> {
    if !f16_scales_exact_for(src_type) {
        return Err(Error::Unsupported {
            what: "f16 scales (not exact for this type)",
            name: src_type.name(),
        });
    }
    transcode_impl(src_type, src, rows, cols, true, w)
}

fn transcode_impl(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    with_f16: bool,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let layout = native_layout_for(src_type);
    let row_bytes = to_usize(check_src(src_type, src, rows, cols)?, "row bytes")?;
    let with_f16 = with_f16 && layout.has_scales();
    let (h, total) = NativeTensorHeader::new(layout, rows, cols, with_f16)?;
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
    // Optional f16 copies: scales, then mins (exact for these types).
    if with_f16 {
        pad_to(w, &mut written, h.f16_scales_off)?;
        let mut h16 = Vec::with_capacity(scales.len());
        for want_mins in [false, true] {
            if want_mins && !layout.has_mins() {
                continue;
            }
            for row in src.chunks_exact(row_bytes) {
                decode_row(row, &mut codes, &mut scales, &mut mins);
                let a = if want_mins { &mins } else { &scales };
                h16.clear();
                h16.extend(a.iter().map(|&v| f16::from_f32(v).to_bits()));
                debug_assert!(a
                    .iter()
                    .all(|&v| f16::from_f32(v).to_f32().to_bits() == v.to_bits()));
                w.write_all(bytemuck::cast_slice(&h16))?;
                written += (h16.len() * 2) as u64;
            }
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
/// quantized from `rows x cols` values of `src_type`: F32/F16/BF16, or any
/// ggml block type [`crate::ggml::can_dequantize`] decodes (re-quantization:
/// each row is dequantized exactly, then quantized as a float row would be,
/// so the result equals quantizing the dequantized f32 tensor, byte for
/// byte). Returns the bytes written.
///
/// Each group gets the candidate (scale, min, codes) with the smallest squared
/// error among: ggml's own choice for Q8_0 / Q4_0 / Q4_1 (with its f16-rounded
/// scale), a scan of scales around it, and a least-squares refit of each;
/// so the error is never above what ggml's quantizer reaches on the same
/// group. Scales and mins are rounded to f16 before they are compared, so
/// they are exactly representable in f16 (DESIGN.md: an f16 copy may be
/// stored; see [`quantize_with_f16_scales`]).
pub fn quantize(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: Layout,
    w: &mut impl Write,
) -> Result<u64, Error> {
    quantize_impl(src_type, src, rows, cols, target, false, w)
}

/// [`quantize`] plus the exact f16 copy of the scales and mins (header flag
/// bit 0), which the kernels then read. The quantizer only picks f16-exact
/// scales and mins, so this fails (with [`Error::Unsupported`], after the
/// codes were written) only for values beyond f16's range (|scale| > 65504).
/// The length is `NativeTensorHeader::new(target, rows, cols, true)?.1`.
pub fn quantize_with_f16_scales(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: Layout,
    w: &mut impl Write,
) -> Result<u64, Error> {
    quantize_impl(src_type, src, rows, cols, target, true, w)
}

fn quantize_impl(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: Layout,
    with_f16: bool,
    w: &mut impl Write,
) -> Result<u64, Error> {
    if !crate::ggml::can_dequantize(src_type) {
        return Err(Error::Unsupported {
            what: "quantize source",
            name: src_type.name(),
        });
    }
    let floaty = matches!(src_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
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
    let (h, total) = NativeTensorHeader::new(target, rows, cols, with_f16)?;
    w.write_all(&h.to_bytes())?;
    let mut written = 64u64;
    let cols_us = to_usize(cols, "cols")?;
    let ng = cols_us / 32;
    let is4 = !matches!(target, Layout::I8Sym { .. });
    let code_bytes = if is4 { cols_us / 2 } else { cols_us };
    let n_groups = to_usize(mul(rows, ng as u64, "group count")?, "group count")?;
    let mut scales = vec![0f32; n_groups];
    let mut mins = vec![0f32; if target.has_mins() { n_groups } else { 0 }];
    // Rows are independent: quantize a chunk of rows in parallel (rayon;
    // conversion is throughput-bound, not latency-bound), write it in order.
    // Memory: one chunk of codes plus the tensor's scales/mins.
    let chunk_rows = (CHUNK_BYTES / code_bytes.max(1)).clamp(1, 4096);
    let mut codes = vec![0u8; chunk_rows * code_bytes];
    let quantize_row =
        |row: &[u8], codes: &mut [u8], scales: &mut [f32], mins: &mut [f32]| -> Result<(), Error> {
            let mut x = vec![0f32; cols_us];
            if floaty {
                row_to_f32(src_type, row, &mut x);
            } else {
                crate::ggml::dequantize_ggml(src_type, row, &mut x)?;
            }
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
                scales[gi] = s;
                if !mins.is_empty() {
                    mins[gi] = m;
                }
            }
            Ok(())
        };
    let rows_us = src.len() / row_bytes;
    let mut r0 = 0;
    while r0 < rows_us {
        let n = chunk_rows.min(rows_us - r0);
        let src_chunk = &src[r0 * row_bytes..(r0 + n) * row_bytes];
        let sc = &mut scales[r0 * ng..(r0 + n) * ng];
        let mn: &mut [f32] = if mins.is_empty() {
            &mut []
        } else {
            &mut mins[r0 * ng..(r0 + n) * ng]
        };
        let cc = &mut codes[..n * code_bytes];
        if mn.is_empty() {
            cc.par_chunks_mut(code_bytes)
                .zip(sc.par_chunks_mut(ng))
                .zip(src_chunk.par_chunks(row_bytes))
                .try_for_each(|((c, s), row)| quantize_row(row, c, s, &mut []))?;
        } else {
            cc.par_chunks_mut(code_bytes)
                .zip(sc.par_chunks_mut(ng))
                .zip(mn.par_chunks_mut(ng))
                .zip(src_chunk.par_chunks(row_bytes))
                .try_for_each(|(((c, s), m), row)| quantize_row(row, c, s, m))?;
        }
        w.write_all(cc)?;
        written += cc.len() as u64;
        r0 += n;
    }
    pad_to(w, &mut written, h.scales_off)?;
    w.write_all(f32s_as_bytes(&scales))?;
    written += scales.len() as u64 * 4;
    if h.mins_off != 0 {
        pad_to(w, &mut written, h.mins_off)?;
        w.write_all(f32s_as_bytes(&mins))?;
        written += mins.len() as u64 * 4;
    }
    if with_f16 {
        let (Some(s16), Some(m16)) = (f16_scales_if_exact(&scales), f16_scales_if_exact(&mins))
        else {
            return Err(Error::Unsupported {
                what: "f16 scales (a scale exceeds the f16 range)",
                name: target.name(),
            });
        };
        pad_to(w, &mut written, h.f16_scales_off)?;
        for a in [s16, m16] {
            w.write_all(bytemuck::cast_slice(&a))?;
            written += a.len() as u64 * 2;
        }
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

/// C `roundf` (half away from zero) for |v| < 2^31 (callers clamp first);
/// `f32::round` is a libm call on baseline x86-64.
#[inline(always)]
fn roundf(v: f32) -> f32 {
    let t = v as i32; // truncation toward zero
    let f = v - t as f32;
    (t + (f >= 0.5) as i32 - (f <= -0.5) as i32) as f32
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

struct Best {
    q: [u8; 32],
    s: f32,
    m: f32,
    err: f64,
    /// `s` and `m` are exactly representable in f16.
    exact: bool,
}

impl Best {
    fn new() -> Self {
        Best {
            q: [0; 32],
            s: 0.0,
            m: 0.0,
            err: f64::INFINITY,
            exact: false,
        }
    }
    /// Considers codes `q` with scale `s` and min `m`, both rounded to f16
    /// (so that the tensor can carry an exact f16 copy, DESIGN.md); only when
    /// that overflows f16 (|s| > 65504) the f32 values, ranked after every
    /// f16-exact candidate.
    fn offer(&mut self, layout: Layout, x: &[f32; 32], q: [u8; 32], s: f32, m: f32) {
        let (s16, m16) = (f16_round(s), f16_round(m));
        let (s, m, exact) = if s16.is_finite() && m16.is_finite() {
            (s16, m16, true)
        } else {
            (s, m, false)
        };
        if !s.is_finite() || !m.is_finite() {
            return;
        }
        let e = sse(layout, x, &q, s, m);
        let better = match (exact, self.exact) {
            (true, false) => true,
            (false, true) => false,
            _ => e < self.err,
        };
        if better {
            *self = Best {
                q,
                s,
                m,
                err: e,
                exact,
            };
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
        q[i] = (roundf((x[i] * id).clamp(-128.0, 128.0)).clamp(-127.0, 127.0) as i8) as u8;
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
            q2[i] = (roundf((x[i] / s).clamp(-128.0, 128.0)).clamp(-127.0, 127.0) as i8) as u8;
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
    // least-squares refit. The scan ranks candidates by the analytic error
    // Σx² - 2·s·Σxq + s²·Σq² (cheap); only the winner's error is then computed
    // exactly and compared with ggml's candidates above, so the result is
    // never worse than ggml's.
    let sxx: f32 = x.iter().map(|&v| v * v).sum();
    let codes_for = |s: f32| -> [f32; 32] {
        let inv = 1.0 / s;
        let mut qf = [0f32; 32];
        for i in 0..32 {
            qf[i] = roundf((x[i] * inv).clamp(-9.0, 8.0)).clamp(-8.0, 7.0);
        }
        qf
    };
    // (scale, analytic error) of the best scan candidate; f32 lane sums so
    // the loops vectorize (ranking only: the winner is re-checked exactly).
    let mut scan: Option<(f32, f32)> = None;
    for step in -10..=10 {
        let s0 = max / (-8.0 + 0.1 * step as f32);
        for flip in [1.0f32, -1.0] {
            let s = s0 * flip;
            if s == 0.0 || !s.is_finite() {
                continue;
            }
            let qf = codes_for(s);
            let (mut a, mut b) = ([0f32; 8], [0f32; 8]);
            for i in 0..32 {
                a[i % 8] += qf[i] * x[i];
                b[i % 8] += qf[i] * qf[i];
            }
            let (sxq, sqq): (f32, f32) = (a.iter().sum(), b.iter().sum());
            let mut consider = |sc: f32| {
                let e = sxx - 2.0 * sc * sxq + sc * sc * sqq;
                if sc.is_finite() && sc != 0.0 && scan.is_none_or(|b| e < b.1) {
                    scan = Some((sc, e));
                }
            };
            consider(s);
            if sqq > 0.0 {
                consider(sxq / sqq);
            }
        }
    }
    if let Some((s, _)) = scan {
        // The refit scale's own rounding of the codes, checked exactly.
        let qf = codes_for(s);
        let mut q = [0u8; 32];
        for i in 0..32 {
            q[i] = (qf[i] as i8 + 8) as u8;
        }
        best.offer(l, x, q, s, 0.0);
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
            q[i] = roundf(((x[i] - m) / s).clamp(-1.0, 16.0)).clamp(0.0, 15.0) as u8;
        }
        best.offer(l, x, q, s, m);
    }
    (best.q, best.s, best.m)
}

/// The scales as IEEE binary16 bits if every one converts exactly (bit for
/// bit, signed zeros included), else `None`. Q4_0/Q8_0 scales always do
/// (they were f16 in the source); K-quant folded scales usually do not.
pub fn f16_scales_if_exact(scales: &[f32]) -> Option<Vec<u16>> {
    scales
        .iter()
        .map(|&s| {
            let h = f16::from_f32(s);
            (h.to_f32().to_bits() == s.to_bits()).then_some(h.to_bits())
        })
        .collect()
}

/// Serializes `v` as it is (header, codes, scales, mins and the f16 copy
/// when it has one): the bytes of a standalone native tensor equal to `v`,
/// e.g. to copy one expert's row range of a stacked tensor into a cache.
/// Returns the bytes written.
pub fn write_native(v: &crate::NativeView, w: &mut impl Write) -> Result<u64, Error> {
    let f16 = [v.f16_scales(), v.f16_mins()];
    write_arrays(v, v.has_f16_scales().then_some(&f16[..]), w)
}

/// Header, codes, scales, mins and (when given) the f16 arrays, each at its
/// canonical offset. Returns the bytes written.
fn write_arrays(
    v: &crate::NativeView,
    f16: Option<&[&[u16]]>,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let (h, total) =
        NativeTensorHeader::new(v.layout(), v.rows() as u64, v.cols() as u64, f16.is_some())?;
    w.write_all(&h.to_bytes())?;
    let mut written = 64u64;
    w.write_all(v.codes())?;
    written += v.codes().len() as u64;
    for (off, a) in [(h.scales_off, v.scales()), (h.mins_off, v.mins())] {
        if off != 0 {
            pad_to(w, &mut written, off)?;
            w.write_all(f32s_as_bytes(a))?;
            written += a.len() as u64 * 4;
        }
    }
    if let Some(parts) = f16 {
        pad_to(w, &mut written, h.f16_scales_off)?;
        for p in parts {
            w.write_all(bytemuck::cast_slice(p))?;
            written += p.len() as u64 * 2;
        }
    }
    debug_assert_eq!(written, total);
    Ok(total)
}

/// Re-serializes `v` with an f16 copy of its scales and mins (header flag
/// [`crate::layout::FLAG_F16_SCALES`], array after the others). The kernels
/// then read the f16 copy (fewer bytes per call, same results bit for bit),
/// and GIW v14 readers can alias it. Fails with [`Error::Unsupported`] when
/// `v` has no scales or one scale or min is not exactly representable in f16
/// (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 transcodes always are). Returns the bytes
/// written.
pub fn write_with_f16_scales(v: &crate::NativeView, w: &mut impl Write) -> Result<u64, Error> {
    let layout = v.layout();
    let h16 = if layout.has_scales() {
        f16_scales_if_exact(v.scales())
            .zip(f16_scales_if_exact(v.mins()))
            .map(|(mut s, m)| {
                s.extend_from_slice(&m);
                s
            })
    } else {
        None
    };
    let Some(h16) = h16 else {
        return Err(Error::Unsupported {
            what: "f16 scales (absent or not exact)",
            name: layout.name(),
        });
    };
    write_arrays(v, Some(&[&h16[..]]), w)
}
