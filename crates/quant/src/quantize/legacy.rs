//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the 32-element block types
//! (ggml-quants.c `quantize_row_q*_ref`, and `quantize_row_q*_impl` when an
//! importance matrix is given: what `quantize_q*` runs per row).
//!
//! Block layouts (ggml-common.h): `q4_0 { f16 d; u8 qs[16] }` (x = (q−8)·d,
//! element j in the low nibble of `qs[j]`, element j+16 in its high nibble;
//! 4.5 bpw), `q4_1 { f16 d, m; u8 qs[16] }` (x = q·d + m; 5 bpw), `q5_0 { f16
//! d; u8 qh[4]; u8 qs[16] }` (x = (q−16)·d, bit 4 of element j in bit j of
//! the little-endian `qh`; 5.5 bpw), `q5_1 { f16 d, m; u8 qh[4]; u8 qs[16] }`
//! (6 bpw), `q8_0 { f16 d; i8 qs[32] }` (8.5 bpw).

use super::common::{c_i8, c_u8, fp32_to_fp16, make_qkx3_quants, make_qx_quants};

const QK: usize = 32;

/// `sigma2` of the importance-matrix paths: the row's mean square.
fn row_sigma2(x: &[f32]) -> f32 {
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    sum_x2 / x.len() as f32
}

fn weights_for(xb: &[f32], qw: &[f32], sigma2: f32, out: &mut [f32; QK]) {
    for j in 0..QK {
        out[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
    }
}

fn put_f16(out: &mut [u8], at: usize, v: f32) {
    out[at..at + 2].copy_from_slice(&fp32_to_fp16(v).to_le_bytes());
}

/// The signed value of largest magnitude (first one on ties).
fn signed_absmax(xb: &[f32]) -> f32 {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in xb {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(xb: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// One row of Q4_0 (`out`: `cols / 32 × 18` bytes).
pub(crate) fn q4_0(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let sigma2 = qw.map(|_| row_sigma2(x));
    for (ib, (xb, y)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(18)).enumerate() {
        if let (Some(qw), Some(sigma2)) = (qw, sigma2) {
            let mut w = [0f32; QK];
            weights_for(xb, &qw[ib * QK..], sigma2, &mut w);
            let mut l = [0i8; QK];
            let d = make_qx_quants(8, xb, &mut l, 1, Some(&w));
            put_f16(y, 0, d);
            for j in 0..16 {
                y[2 + j] = (l[j] as u8) | ((l[j + 16] as u8) << 4);
            }
            continue;
        }
        let max = signed_absmax(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(y, 0, d);
        for j in 0..16 {
            let x0 = xb[j] * id;
            let x1 = xb[j + 16] * id;
            let xi0 = c_i8(x0 + 8.5).min(15) as u8;
            let xi1 = c_i8(x1 + 8.5).min(15) as u8;
            y[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// One row of Q4_1 (`cols / 32 × 20` bytes).
pub(crate) fn q4_1(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let sigma2 = qw.map(|_| row_sigma2(x));
    for (ib, (xb, y)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(20)).enumerate() {
        if let (Some(qw), Some(sigma2)) = (qw, sigma2) {
            let mut w = [0f32; QK];
            weights_for(xb, &qw[ib * QK..], sigma2, &mut w);
            let (mut l, mut laux) = ([0u8; QK], [0u8; QK]);
            let mut min = 0f32;
            let d = make_qkx3_quants(
                15, xb, &w, &mut l, &mut min, &mut laux, -0.9, 0.05, 36, false,
            );
            put_f16(y, 0, d);
            put_f16(y, 2, -min);
            for j in 0..16 {
                y[4 + j] = l[j] | (l[j + 16] << 4);
            }
            continue;
        }
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(y, 0, d);
        put_f16(y, 2, min);
        for j in 0..16 {
            let x0 = (xb[j] - min) * id;
            let x1 = (xb[j + 16] - min) * id;
            let xi0 = c_i8(x0 + 0.5).min(15) as u8;
            let xi1 = c_i8(x1 + 0.5).min(15) as u8;
            y[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// Packs 32 five-bit codes into `qh` (4 bytes) and `qs` (16 bytes).
fn pack5(l: &[u8; QK], qh_qs: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..16 {
        let (xi0, xi1) = (l[j], l[j + 16]);
        qh_qs[4 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= ((u32::from(xi0) & 0x10) >> 4) << j;
        qh |= ((u32::from(xi1) & 0x10) >> 4) << (j + 16);
    }
    qh_qs[..4].copy_from_slice(&qh.to_le_bytes());
}

/// One row of Q5_0 (`cols / 32 × 22` bytes).
pub(crate) fn q5_0(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let sigma2 = qw.map(|_| row_sigma2(x));
    for (ib, (xb, y)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(22)).enumerate() {
        let mut l = [0u8; QK];
        if let (Some(qw), Some(sigma2)) = (qw, sigma2) {
            let mut w = [0f32; QK];
            weights_for(xb, &qw[ib * QK..], sigma2, &mut w);
            let mut li = [0i8; QK];
            let d = make_qx_quants(16, xb, &mut li, 1, Some(&w));
            put_f16(y, 0, d);
            for j in 0..QK {
                l[j] = li[j] as u8;
            }
        } else {
            let max = signed_absmax(xb);
            let d = max / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            put_f16(y, 0, d);
            for j in 0..QK {
                l[j] = c_i8(xb[j] * id + 16.5).min(31) as u8;
            }
        }
        pack5(&l, &mut y[2..]);
    }
}

/// One row of Q5_1 (`cols / 32 × 24` bytes).
pub(crate) fn q5_1(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let sigma2 = qw.map(|_| row_sigma2(x));
    for (ib, (xb, y)) in x.chunks_exact(QK).zip(out.chunks_exact_mut(24)).enumerate() {
        let mut l = [0u8; QK];
        if let (Some(qw), Some(sigma2)) = (qw, sigma2) {
            let mut w = [0f32; QK];
            weights_for(xb, &qw[ib * QK..], sigma2, &mut w);
            let mut laux = [0u8; QK];
            let mut min = 0f32;
            let d = make_qkx3_quants(
                31, xb, &w, &mut l, &mut min, &mut laux, -0.9, 0.05, 36, false,
            );
            put_f16(y, 0, d);
            put_f16(y, 2, -min);
        } else {
            let (min, max) = min_max(xb);
            let d = (max - min) / 31.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            put_f16(y, 0, d);
            put_f16(y, 2, min);
            for j in 0..QK {
                l[j] = c_u8((xb[j] - min) * id + 0.5);
            }
        }
        pack5(&l, &mut y[4..]);
    }
}

/// One row of Q8_0 (`cols / 32 × 34` bytes; the importance matrix is not
/// used by ggml for this type).
pub(crate) fn q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        let mut amax = 0f32;
        for &v in xb {
            // C MAX(amax, fabsf(v)).
            let a = v.abs();
            amax = if amax > a { amax } else { a };
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(y, 0, d);
        for j in 0..QK {
            y[2 + j] = c_i8(croundf(xb[j] * id)) as u8;
        }
    }
}

/// C `roundf`: half away from zero, exact for every float (NaN and ±inf
/// pass through).
pub(crate) fn croundf(v: f32) -> f32 {
    if !v.is_finite() || v.abs() >= 8_388_608.0 {
        return v;
    }
    let t = v.trunc();
    if (v - t).abs() >= 0.5 {
        t + v.signum()
    } else {
        t
    }
}
