//! MXFP4: 32 FP4 (E2M1) codes with one shared E8M0 exponent
//! (ggml-quants.c `quantize_row_mxfp4_ref`; ggml has no importance-matrix
//! path for it).
//!
//! Block layout (ggml-common.h): `mxfp4 { u8 e; u8 qs[16] }` (32 weights,
//! x = kvalues_mxfp4[q] · 2^(e−128), element j in the low nibble of `qs[j]`,
//! j+16 in the high one; 4.25 bpw).
//!
//! The exponent is `floorf(log2f(amax)) - 2 + 127`: `f32::log2` is the same
//! glibc `log2f` the C calls on Linux (not correctly rounded just below a
//! power of two, so it matters which one), and the cast to `uint8_t` is the
//! C's `cvttss2si` low byte.

use super::common::c_u8;

/// `kvalues_mxfp4` (= `kvalues_fp4`, ggml-common.h): E2M1 values × 2.
const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's `GGML_E8M0_TO_FP32_HALF`: 2^(e−128) as f32 bits.
fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

fn best_index_mxfp4(x: f32, e: f32) -> u8 {
    let mut best_index = 0u8;
    let mut best_err = (f32::from(KVALUES_MXFP4[0]) * e - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (f32::from(k) * e - x).abs();
        if err < best_err {
            best_index = i as u8;
            best_err = err;
        }
    }
    best_index
}

/// One row of MXFP4 (`cols / 32 × 17` bytes).
pub(crate) fn mxfp4(x: &[f32], out: &mut [u8]) {
    for (xb, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(17)) {
        let mut amax = 0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            c_u8(amax.log2().floor() - 2.0 + 127.0)
        } else {
            0
        };
        let d = e8m0_to_fp32_half(e);
        y[0] = e;
        for j in 0..16 {
            let x0 = best_index_mxfp4(xb[j], d);
            let x1 = best_index_mxfp4(xb[j + 16], d);
            y[1 + j] = x0 | (x1 << 4);
        }
    }
}
