//! The scalar reference kernels: the canonical integer dot of the module docs,
//! written out lane by lane, and plain f32 loops for the float layouts.

use super::{Act, ActRef, QA};
use crate::layout::Layout;
use crate::view::NativeView;
use half::{bf16, f16};

/// The canonical final reduction of the two 8-lane accumulator streams.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn reduce_canonical(acc: &[[f32; 8]; 2]) -> f32 {
    let mut v = [0f32; 8];
    for j in 0..8 {
        v[j] = acc[0][j] + acc[1][j];
    }
    let w = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (w[0] + w[2]) + (w[1] + w[3])
}

/// The signed value code of element `e` of an integer row (the `w` of the
/// canonical sum: the code itself for asymmetric layouts).
#[inline(always)]
fn code_at(layout: Layout, codes: &[u8], e: usize) -> i32 {
    match layout {
        Layout::I8Sym { .. } => i32::from(codes[e] as i8),
        Layout::I8Asym { .. } => i32::from(codes[e]),
        Layout::I4Sym { .. } | Layout::I4Asym { .. } => {
            let (g, i) = (e / 32, e % 32);
            let b = codes[g * 16 + i % 16];
            let q = i32::from(if i < 16 { b & 0xF } else { b >> 4 });
            if matches!(layout, Layout::I4Sym { .. }) {
                q - 8
            } else {
                q
            }
        }
        _ => unreachable!(),
    }
}

/// Canonical dot of one integer row with quantized activations (indexed
/// loops on purpose: they spell out the canonical formula lane by lane).
#[allow(clippy::needless_range_loop)]
pub(crate) fn dot_int_row(
    layout: Layout,
    codes: &[u8],
    scales: &[f32],
    mins: &[f32],
    a: ActRef,
) -> f32 {
    let g16 = layout.group() == 16;
    let asym = layout.has_mins();
    let mut acc = [[0f32; 8]; 2];
    for (b, &dx) in a.d.iter().enumerate() {
        let s = b & 1;
        for j in 0..8 {
            let mut p = 0i32;
            for k in 0..4 {
                let e = b * QA + 4 * j + k;
                p += code_at(layout, codes, e) * i32::from(a.q[e]);
            }
            let gi = if g16 { 2 * b + j / 4 } else { b };
            let ds = scales[gi] * dx;
            acc[s][j] = ds.mul_add(p as f32, acc[s][j]);
            if asym {
                let dm = mins[gi] * dx;
                acc[s][j] = dm.mul_add(a.ls[b * 8 + j] as f32, acc[s][j]);
            }
        }
    }
    reduce_canonical(&acc)
}

/// Dot of one float-layout row (or a dequantized raw ggml row) with f32 `x`.
pub(crate) fn dot_float_row(w: &NativeView, r: usize, x: &[f32], scratch: &mut Vec<f32>) -> f32 {
    let c = w.row_codes(r);
    match w.layout() {
        Layout::F32 => c
            .chunks_exact(4)
            .zip(x)
            .map(|(b, &x)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x)
            .sum(),
        Layout::F16 => c
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &x)| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * x)
            .sum(),
        Layout::BF16 => c
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &x)| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * x)
            .sum(),
        _ => {
            scratch.resize(w.cols(), 0.0);
            w.dequantize_row(r, scratch);
            scratch.iter().zip(x).map(|(a, b)| a * b).sum()
        }
    }
}

/// `out[i] = dot(row r0 + i)`.
pub(crate) fn rows_dot(w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    let mut scratch = Vec::new();
    for (i, o) in out.iter_mut().enumerate() {
        let r = r0 + i;
        *o = match act {
            Act::Int(a) => dot_int_row(
                w.layout(),
                w.row_codes(r),
                w.row_scales(r),
                w.row_mins(r),
                a,
            ),
            Act::Float(x) => dot_float_row(w, r, x, &mut scratch),
        };
    }
}
