//! IQ4_NL and IQ4_XS: 4-bit codes into the non-linear table `kvalues_iq4nl`
//! (ggml-quants.c `quantize_row_iq4_nl_impl`, as `quantize_iq4_nl` and
//! `quantize_iq4_xs` call it: with 7 scale trials each side, with or
//! without an importance matrix).
//!
//! Block layouts (ggml-common.h): `iq4_nl { f16 d; u8 qs[16] }` (32
//! weights, x = d·kvalues[q], element j in the low nibble of `qs[j]`, j+16
//! in the high one; 4.5 bpw), `iq4_xs { f16 d; u16 scales_h; u8
//! scales_l[4]; u8 qs[128] }` (256 weights in 8 sub-blocks of 32 with a
//! 6-bit signed scale each, low 4 bits in `scales_l`, high 2 in
//! `scales_h`; 4.25 bpw).

use super::common::{best_index_int8, fp32_to_fp16, nearest_int, GROUP_MAX_EPS};

/// `kvalues_iq4nl` (ggml-common.h).
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const NTRY: i32 = 7;

/// `quantize_row_iq4_nl_impl` for one super-block of `x.len()` weights
/// (32: IQ4_NL; 256: IQ4_XS) with `ntry` = 7. Writes `d` (f16 bits), the
/// packed codes `q4` (`x.len() / 2` bytes) and, for 256, the sub-scales.
/// `l` carries codes between calls as the C's buffer does (an all-zero
/// sub-block of IQ4_NL leaves its codes to the table index of 0).
#[inline(always)]
fn iq4_impl(
    x: &[f32],
    qw: Option<&[f32]>,
    dh: &mut u16,
    q4: &mut [u8],
    scales_hl: Option<(&mut u16, &mut [u8])>,
    l: &mut [u8],
) {
    let sbs = x.len();
    let values = &KVALUES_IQ4NL;
    let mut sigma2 = 0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / sbs as f32;
    q4[..sbs / 2].fill(0);
    *dh = fp32_to_fp16(0.0);
    let nb = sbs / 32;
    let mut scales = [0f32; 8];
    let mut weight = [0f32; 32];
    let mut max_scale = 0f32;
    let mut amax_scale = 0f32;
    let v0 = f32::from(values[0]);
    for ib in 0..nb {
        let xb = &x[ib * 32..ib * 32 + 32];
        let lb = &mut l[ib * 32..ib * 32 + 32];
        match qw {
            Some(q) => {
                let q = &q[ib * 32..];
                for j in 0..32 {
                    weight[j] = q[j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..32 {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let mut amax = 0f32;
        let mut max = 0f32;
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = -max / v0; // ntry > 0
        let mut id = 1.0 / d;
        let mut sumqx = 0f32;
        let mut sumq2 = 0f32;
        for j in 0..32 {
            let al = id * xb[j];
            let li = best_index_int8(values, al);
            lb[j] = li as u8;
            let q = f32::from(values[li]);
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            id = (itry as f32 + v0) / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..32 {
                let al = id * xb[j];
                let li = best_index_int8(values, al);
                let q = f32::from(values[li]);
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if let Some((scales_h, scales_l)) = scales_hl {
        *scales_h = 0;
        let d = -max_scale / 32.0;
        *dh = fp32_to_fp16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let mut li = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[ib * 32..ib * 32 + 32];
            for j in 0..32 {
                l[ib * 32 + j] = best_index_int8(values, idl * xb[j]) as u8;
            }
            li += 32;
            let l_l = (li & 0xf) as u8;
            let l_h = (li >> 4) as u16;
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            *scales_h |= l_h << (2 * (ib % 8));
        }
    } else {
        *dh = fp32_to_fp16(scales[0]);
        let id = if scales[0] != 0.0 {
            1.0 / scales[0]
        } else {
            0.0
        };
        for j in 0..sbs {
            l[j] = best_index_int8(values, id * x[j]) as u8;
        }
    }
    for i in 0..sbs / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

/// One row of IQ4_NL (`cols / 32 × 18` bytes).
#[inline(always)]
pub(crate) fn iq4_nl(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let mut l = [0u8; 32];
    for (ib, (xb, y)) in x.chunks_exact(32).zip(out.chunks_exact_mut(18)).enumerate() {
        let mut dh = 0u16;
        let (d, qs) = y.split_at_mut(2);
        iq4_impl(xb, qw.map(|q| &q[ib * 32..]), &mut dh, qs, None, &mut l);
        d.copy_from_slice(&dh.to_le_bytes());
    }
}

/// One row of IQ4_XS (`cols / 256 × 136` bytes).
#[inline(always)]
pub(crate) fn iq4_xs(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let mut l = [0u8; 256];
    for (ib, (xb, y)) in x
        .chunks_exact(256)
        .zip(out.chunks_exact_mut(136))
        .enumerate()
    {
        let (mut dh, mut sh) = (0u16, 0u16);
        let (head, qs) = y.split_at_mut(8);
        let mut sl = [0u8; 4];
        iq4_impl(
            xb,
            qw.map(|q| &q[ib * 256..]),
            &mut dh,
            qs,
            Some((&mut sh, &mut sl)),
            &mut l,
        );
        head[0..2].copy_from_slice(&dh.to_le_bytes());
        head[2..4].copy_from_slice(&sh.to_le_bytes());
        head[4..8].copy_from_slice(&sl);
    }
}
