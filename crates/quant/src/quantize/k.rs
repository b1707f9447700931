//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: the 256-element super-block types
//! (ggml-quants.c `quantize_row_q*_K_ref`, and `quantize_row_q*_K_impl`
//! with an importance matrix: what `quantize_q*_K` runs per row).
//!
//! Block layouts (ggml-common.h; 256 weights each): `q2_K { u8 scales[16];
//! u8 qs[64]; f16 d, dmin }` (84 bytes, 2.625 bpw: 16 sub-blocks of 16, a
//! 4-bit scale and min each), `q3_K { u8 hmask[32]; u8 qs[64]; u8
//! scales[12]; f16 d }` (110 bytes, 3.4375 bpw: 6-bit signed sub-scales),
//! `q4_K { f16 d, dmin; u8 scales[12]; u8 qs[128] }` (144 bytes, 4.5 bpw: 8
//! sub-blocks of 32, 6-bit scale and min), `q5_K { f16 d, dmin; u8
//! scales[12]; u8 qh[32]; u8 qs[128] }` (176 bytes, 5.5 bpw), `q6_K { u8
//! ql[128]; u8 qh[64]; i8 scales[16]; f16 d }` (210 bytes, 6.5625 bpw).

use super::common::{
    fp16_to_fp32, fp32_to_fp16, make_q3_quants, make_qp_quants, make_qx_quants, nearest_int,
    GROUP_MAX_EPS,
};
use super::lanes::{from_lanes, make_qkx_lanes, make_qx1_lanes, to_lanes, Search};

const QK_K: usize = 256;

#[inline(always)]
fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[inline(always)]
fn sum_sq(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for &v in x {
        s += v * v;
    }
    s
}

/// Packs 2-bit codes `l` (256) into `qs` (64 bytes), ggml's order.
#[inline(always)]
fn pack2(l: &[u8; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

/// One row of Q2_K (`cols / 256 × 84` bytes).
#[inline(always)]
pub(crate) fn q2_k(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    for (ib, (x, y)) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(84))
        .enumerate()
    {
        let mut l = [0u8; QK_K];
        let (sc_out, rest) = y.split_at_mut(16);
        let (qs, dd) = rest.split_at_mut(64);
        let (dm, mm);
        let xt = to_lanes::<16, 16>(x);
        let mut wt = [[0f32; 16]; 16];
        let mut lt = [[0u8; 16]; 16];
        if let Some(qw) = qw {
            let qt = to_lanes::<16, 16>(&qw[ib * QK_K..ib * QK_K + QK_K]);
            let sigma2 = sum_sq(x) / QK_K as f32;
            let mut sw = [0f32; 16];
            for i in 0..16 {
                for k in 0..16 {
                    wt[i][k] = qt[i][k] * (sigma2 + xt[i][k] * xt[i][k]).sqrt();
                    sw[k] += wt[i][k];
                }
            }
            let p = Search {
                nmax: 3,
                rmin: -0.9,
                rdelta: 0.05,
                nstep: 36,
                use_mad: false,
            };
            let (scales, mins) = make_qkx_lanes::<16, 16, true>(p, &xt, &wt, &mut lt);
            from_lanes(&lt, &mut l);
            let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
            let d = make_qp_quants(15, &scales, &mut ls, &sw);
            let m = make_qp_quants(15, &mins, &mut lm, &sw);
            let (dh, mh) = (fp32_to_fp16(d), fp32_to_fp16(m));
            dd[..2].copy_from_slice(&dh.to_le_bytes());
            dd[2..4].copy_from_slice(&mh.to_le_bytes());
            dm = fp16_to_fp32(dh);
            mm = fp16_to_fp32(mh);
            for j in 0..16 {
                sc_out[j] = ls[j] | (lm[j] << 4);
            }
        } else {
            for i in 0..16 {
                for k in 0..16 {
                    wt[i][k] = xt[i][k].abs();
                }
            }
            let p = Search {
                nmax: 3,
                rmin: -0.5,
                rdelta: 0.1,
                nstep: 15,
                use_mad: true,
            };
            let (scales, mins) = make_qkx_lanes::<16, 16, false>(p, &xt, &wt, &mut lt);
            from_lanes(&lt, &mut l);
            let mut max_scale = 0f32;
            let mut max_min = 0f32;
            for j in 0..16 {
                if scales[j] > max_scale {
                    max_scale = scales[j];
                }
                if mins[j] > max_min {
                    max_min = mins[j];
                }
            }
            let q4scale = 15f32;
            let dh = if max_scale > 0.0 {
                let iscale = q4scale / max_scale;
                for j in 0..16 {
                    sc_out[j] = nearest_int(iscale * scales[j]) as u8;
                }
                fp32_to_fp16(max_scale / q4scale)
            } else {
                sc_out.fill(0);
                fp32_to_fp16(0.0)
            };
            let mh = if max_min > 0.0 {
                let iscale = q4scale / max_min;
                for j in 0..16 {
                    let lv = nearest_int(iscale * mins[j]);
                    sc_out[j] |= (lv << 4) as u8;
                }
                fp32_to_fp16(max_min / q4scale)
            } else {
                fp32_to_fp16(0.0)
            };
            dd[..2].copy_from_slice(&dh.to_le_bytes());
            dd[2..4].copy_from_slice(&mh.to_le_bytes());
            dm = fp16_to_fp32(dh);
            mm = fp16_to_fp32(mh);
        }
        for j in 0..16 {
            let d = dm * f32::from(sc_out[j] & 0xF);
            if d == 0.0 {
                continue;
            }
            let m = mm * f32::from(sc_out[j] >> 4);
            for k in 0..16 {
                let lv = nearest_int((x[16 * j + k] + m) / d).clamp(0, 3);
                l[16 * j + k] = lv as u8;
            }
        }
        pack2(&l, qs);
    }
}

/// Writes the 16 six-bit Q3_K sub-scales `ls` (already offset by 32) into
/// `scales` (12 bytes).
#[inline(always)]
fn put_q3_scales(ls: &[i32; 16], scales: &mut [u8]) {
    scales[..12].fill(0);
    for j in 0..16 {
        let mut l = ls[j];
        if j < 8 {
            scales[j] = (l & 0xF) as u8;
        } else {
            scales[j - 8] |= ((l & 0xF) << 4) as u8;
        }
        l >>= 4;
        scales[j % 4 + 8] |= (l << (2 * (j / 4))) as u8;
    }
}

/// Q3_K's codes for the stored scales, packed into `hmask` and `qs`.
#[inline(always)]
fn q3_finish(x: &[f32], l: &mut [i8; QK_K], y: &mut [u8]) {
    let d_all = fp16_to_fp32(u16::from_le_bytes([y[108], y[109]]));
    for j in 0..16 {
        let sc = if j < 8 {
            y[96 + j] & 0xF
        } else {
            y[96 + j - 8] >> 4
        } as i8;
        let sc = (sc | ((((y[96 + 8 + j % 4] >> (2 * (j / 4))) & 3) << 4) as i8)) - 32;
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        for k in 0..16 {
            let lv = nearest_int(x[16 * j + k] / d).clamp(-4, 3);
            l[16 * j + k] = (lv + 4) as i8;
        }
    }
    let (hmask, rest) = y.split_at_mut(32);
    hmask.fill(0);
    let mut m = 0usize;
    let mut hm = 1u8;
    let mut lu = [0u8; QK_K];
    for j in 0..QK_K {
        if l[j] > 3 {
            hmask[m] |= hm;
            l[j] -= 4;
        }
        lu[j] = l[j] as u8;
        m += 1;
        if m == QK_K / 8 {
            m = 0;
            hm <<= 1;
        }
    }
    pack2(&lu, &mut rest[..64]);
}

/// One row of Q3_K (`cols / 256 × 110` bytes).
#[inline(always)]
pub(crate) fn q3_k(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    for (ib, (x, y)) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(110))
        .enumerate()
    {
        let mut l = [0i8; QK_K];
        if let Some(qw) = qw {
            let qt = to_lanes::<16, 16>(&qw[ib * QK_K..ib * QK_K + QK_K]);
            let xt = to_lanes::<16, 16>(x);
            let sigma2 = 2.0 * sum_sq(x) / QK_K as f32;
            let mut sw = [0f32; 16];
            let mut wt = [[0f32; 16]; 16];
            for i in 0..16 {
                for k in 0..16 {
                    wt[i][k] = qt[i][k] * (sigma2 + xt[i][k] * xt[i][k]).sqrt();
                    sw[k] += wt[i][k];
                }
            }
            let mut lt = [[0i8; 16]; 16];
            let scales = make_qx1_lanes::<16, 16>(4, &xt, Some(&wt), &mut lt);
            from_lanes(&lt, &mut l);
            let mut ls8 = [0i8; 16];
            let d_block = make_qx_quants(32, &scales, &mut ls8, 1, Some(&sw));
            let ls = ls8.map(i32::from);
            put_q3_scales(&ls, &mut y[96..108]);
            y[108..110].copy_from_slice(&fp32_to_fp16(d_block).to_le_bytes());
        } else {
            let mut scales = [0f32; 16];
            let mut max_scale = 0f32;
            let mut amax = 0f32;
            for j in 0..16 {
                scales[j] = make_q3_quants(
                    4,
                    &x[16 * j..16 * j + 16],
                    &mut l[16 * j..16 * j + 16],
                    true,
                );
                let scale = scales[j].abs();
                if scale > amax {
                    amax = scale;
                    max_scale = scales[j];
                }
            }
            if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                let mut ls = [0i32; 16];
                for j in 0..16 {
                    // C: `int8_t l = nearest_int(...)`, then clamped in int.
                    let lv = i32::from(nearest_int(iscale * scales[j]) as i8);
                    ls[j] = lv.clamp(-32, 31) + 32;
                }
                put_q3_scales(&ls, &mut y[96..108]);
                y[108..110].copy_from_slice(&fp32_to_fp16(1.0 / iscale).to_le_bytes());
            } else {
                y[96..108].fill(0);
                y[108..110].copy_from_slice(&fp32_to_fp16(0.0).to_le_bytes());
            }
        }
        q3_finish(x, &mut l, y);
    }
}

/// Writes 8 six-bit scales and mins into the 12-byte `scales` of Q4_K/Q5_K.
#[inline(always)]
fn put_k4_scales(ls: &[u8; 8], lm: &[u8; 8], scales: &mut [u8]) {
    for j in 0..8 {
        let (s, m) = (ls[j], lm[j]);
        if j < 4 {
            scales[j] = s;
            scales[j + 4] = m;
        } else {
            scales[j + 4] = (s & 0xF) | ((m & 0xF) << 4);
            scales[j - 4] |= (s >> 4) << 6;
            scales[j] |= (m >> 4) << 6;
        }
    }
}

/// Super-blocks searched together: `G·8` (Q4_K, Q5_K) or `G·16` (Q2_K,
/// Q3_K, Q6_K) lanes, so each lane loop has several independent chains of
/// additions in flight ([`super::lanes`]).
const G: usize = 4;

/// Lane `k`'s codes of super-block `b` (lanes `P·b ..`, sub-blocks of `N`)
/// in element order.
#[inline(always)]
fn block_codes<T: Copy + Default, const N: usize, const L: usize, const P: usize>(
    lt: &[[T; L]; N],
    b: usize,
) -> [T; QK_K] {
    let mut l = [T::default(); QK_K];
    for j in 0..P {
        for i in 0..N {
            l[N * j + i] = lt[i][P * b + j];
        }
    }
    l
}

/// The search part of Q4_K and Q5_K for `L / 8` consecutive super-blocks
/// (`x`: their `L·32` weights, `qw` their importance weights): each
/// sub-block's scale and min (`make_qkx2_quants`, or `make_qkx3_quants`
/// with an importance matrix), the sums of its weights (imatrix only) and
/// its codes, in lanes.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn k4_search<const L: usize>(
    x: &[f32],
    qw: Option<&[f32]>,
    nmax: i32,
) -> ([f32; L], [f32; L], [f32; L], [[u8; L]; 32]) {
    let xt = to_lanes::<32, L>(x);
    let mut wt = [[0f32; L]; 32];
    let mut lt = [[0u8; L]; 32];
    let mut sw = [0f32; L];
    let (scales, mins) = if let Some(qw) = qw {
        let qt = to_lanes::<32, L>(&qw[..32 * L]);
        let mut sigma2 = [0f32; L];
        for b in 0..L / 8 {
            let s2 = 2.0 * sum_sq(&x[QK_K * b..QK_K * b + QK_K]) / QK_K as f32;
            sigma2[8 * b..8 * b + 8].fill(s2);
        }
        for i in 0..32 {
            for k in 0..L {
                wt[i][k] = qt[i][k] * (sigma2[k] + xt[i][k] * xt[i][k]).sqrt();
                sw[k] += wt[i][k];
            }
        }
        let p = Search {
            nmax,
            rmin: -0.9,
            rdelta: 0.05,
            nstep: 36,
            use_mad: false,
        };
        make_qkx_lanes::<32, L, true>(p, &xt, &wt, &mut lt)
    } else {
        // make_qkx2_quants' search: Q5_K (-0.5, 0.1, 15), Q4_K (-1, 0.1, 20).
        let (rmin, nstep) = if nmax == 31 { (-0.5, 15) } else { (-1.0, 20) };
        let p = Search {
            nmax,
            rmin,
            rdelta: 0.1,
            nstep,
            use_mad: false,
        };
        // av_x = sqrt(Σ x² / 32) per sub-block, the sums in element order.
        let mut ss = [0f32; L];
        for i in 0..32 {
            for k in 0..L {
                ss[k] += xt[i][k] * xt[i][k];
            }
        }
        let av_x = ss.map(|v| (v / 32.0).sqrt());
        for i in 0..32 {
            for k in 0..L {
                wt[i][k] = av_x[k] + xt[i][k].abs();
            }
        }
        make_qkx_lanes::<32, L, false>(p, &xt, &wt, &mut lt)
    };
    (scales, mins, sw, lt)
}

/// The rest of Q4_K and Q5_K for one super-block, from its sub-blocks'
/// `scales`, `mins`, weight sums `sw` (given with an importance matrix) and
/// search codes `l`:
/// `d`, `dmin` and the packed 6-bit scales (bytes 0..16 of the block), and
/// the codes (0..=nmax) for the stored values into `l`.
#[inline(always)]
fn k4_finish(
    x: &[f32],
    scales: &[f32],
    mins: &[f32],
    sw: Option<&[f32]>,
    nmax: i32,
    y: &mut [u8],
    l: &mut [u8; QK_K],
) {
    if let Some(sw) = sw {
        let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
        let d_block = make_qp_quants(63, scales, &mut ls, sw);
        let m_block = make_qp_quants(63, mins, &mut lm, sw);
        // Q5_K's impl clamps the codes to 63, Q4_K's does not (they differ
        // only for a code that wrapped: a negative sub-scale).
        if nmax == 31 {
            ls = ls.map(|v| v.min(63));
            lm = lm.map(|v| v.min(63));
        }
        put_k4_scales(&ls, &lm, &mut y[4..16]);
        y[0..2].copy_from_slice(&fp32_to_fp16(d_block).to_le_bytes());
        y[2..4].copy_from_slice(&fp32_to_fp16(m_block).to_le_bytes());
    } else {
        let mut max_scale = 0f32;
        let mut max_min = 0f32;
        for j in 0..8 {
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
        for j in 0..8 {
            // C: `uint8_t ls = nearest_int(...)` (truncated), then MIN(63, ls).
            ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
        }
        put_k4_scales(&ls, &lm, &mut y[4..16]);
        y[0..2].copy_from_slice(&fp32_to_fp16(max_scale / 63.0).to_le_bytes());
        y[2..4].copy_from_slice(&fp32_to_fp16(max_min / 63.0).to_le_bytes());
    }
    let d_all = fp16_to_fp32(u16::from_le_bytes([y[0], y[1]]));
    let m_all = fp16_to_fp32(u16::from_le_bytes([y[2], y[3]]));
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, &y[4..16]);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = m_all * f32::from(m);
        for k in 0..32 {
            let lv = nearest_int((x[32 * j + k] + dm) / d).clamp(0, nmax);
            l[32 * j + k] = lv as u8;
        }
    }
}

/// Q4_K or Q5_K (`nmax` 15 or 31, blocks of `bs` bytes) for one row:
/// searches groups of [`G`] super-blocks (then the rest one by one),
/// finishes each block and packs its codes with `pack(codes, block)`.
/// (No closures here: a closure is not inlined into the `#[target_feature]`
/// copies, and its loops would stay baseline code.)
#[inline(always)]
fn k4_row(
    x: &[f32],
    qw: Option<&[f32]>,
    out: &mut [u8],
    nmax: i32,
    bs: usize,
    pack: fn(&[u8; QK_K], &mut [u8]),
) {
    let nb = x.len() / QK_K;
    let mut ib = 0;
    while ib + G <= nb {
        let xs = &x[QK_K * ib..QK_K * (ib + G)];
        let qs = qw.map(|q| &q[QK_K * ib..QK_K * (ib + G)]);
        let (scales, mins, sw, lt) = k4_search::<{ 8 * G }>(xs, qs, nmax);
        for b in 0..G {
            let mut l = block_codes::<u8, 32, { 8 * G }, 8>(&lt, b);
            let r = 8 * b..8 * b + 8;
            let y = &mut out[bs * (ib + b)..bs * (ib + b + 1)];
            let xb = &xs[QK_K * b..QK_K * (b + 1)];
            let sw = qw.is_some().then_some(&sw[r.clone()]);
            k4_finish(xb, &scales[r.clone()], &mins[r], sw, nmax, y, &mut l);
            pack(&l, y);
        }
        ib += G;
    }
    while ib < nb {
        let xb = &x[QK_K * ib..QK_K * (ib + 1)];
        let qs = qw.map(|q| &q[QK_K * ib..QK_K * (ib + 1)]);
        let (scales, mins, sw, lt) = k4_search::<8>(xb, qs, nmax);
        let mut l = block_codes::<u8, 32, 8, 8>(&lt, 0);
        let y = &mut out[bs * ib..bs * (ib + 1)];
        let sw = qw.is_some().then_some(&sw[..]);
        k4_finish(xb, &scales, &mins, sw, nmax, y, &mut l);
        pack(&l, y);
        ib += 1;
    }
}

/// Q4_K's codes (two per byte) into bytes 16.. of its block.
#[inline(always)]
fn pack_q4_k(l: &[u8; QK_K], y: &mut [u8]) {
    let q = &mut y[16..144];
    for (jj, j) in (0..QK_K).step_by(64).enumerate() {
        for k in 0..32 {
            q[32 * jj + k] = l[j + k] | (l[j + k + 32] << 4);
        }
    }
}

/// Q5_K's codes (high bits in `qh`, low nibbles in `ql`) into bytes 16..
/// of its block.
#[inline(always)]
fn pack_q5_k(l: &[u8; QK_K], y: &mut [u8]) {
    let (qh, ql) = y[16..176].split_at_mut(32);
    qh.fill(0);
    let (mut m1, mut m2) = (1u8, 2u8);
    for (nn, n) in (0..QK_K).step_by(64).enumerate() {
        for j in 0..32 {
            let mut l1 = l[n + j];
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            let mut l2 = l[n + j + 32];
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[32 * nn + j] = l1 | (l2 << 4);
        }
        m1 <<= 2;
        m2 <<= 2;
    }
}

/// One row of Q4_K (`cols / 256 × 144` bytes).
#[inline(always)]
pub(crate) fn q4_k(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    k4_row(x, qw, out, 15, 144, pack_q4_k);
}

/// One row of Q5_K (`cols / 256 × 176` bytes).
#[inline(always)]
pub(crate) fn q5_k(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    k4_row(x, qw, out, 31, 176, pack_q5_k);
}

/// One row of Q6_K (`cols / 256 × 210` bytes).
#[inline(always)]
pub(crate) fn q6_k(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    for (ib, (x, y)) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(210))
        .enumerate()
    {
        let mut l = [0i8; QK_K];
        let xt = to_lanes::<16, 16>(x);
        let qt = qw.map(|q| to_lanes::<16, 16>(&q[ib * QK_K..ib * QK_K + QK_K]));
        let mut lt = [[0i8; 16]; 16];
        let scales = make_qx1_lanes::<16, 16>(32, &xt, qt.as_ref(), &mut lt);
        from_lanes(&lt, &mut l);
        let mut max_scale = 0f32;
        let mut max_abs_scale = 0f32;
        for j in 0..16 {
            let abs_scale = scales[j].abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scales[j];
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            y[208..210].copy_from_slice(&fp32_to_fp16(0.0).to_le_bytes());
            continue;
        }
        let iscale = -128.0 / max_scale;
        let dh = fp32_to_fp16(1.0 / iscale);
        y[208..210].copy_from_slice(&dh.to_le_bytes());
        for j in 0..16 {
            y[192 + j] = nearest_int(iscale * scales[j]).min(127) as i8 as u8;
        }
        let d_all = fp16_to_fp32(dh);
        for j in 0..16 {
            let d = d_all * f32::from(y[192 + j] as i8);
            if d == 0.0 {
                continue;
            }
            for k in 0..16 {
                let lv = nearest_int(x[16 * j + k] / d).clamp(-32, 31);
                l[16 * j + k] = (lv + 32) as i8;
            }
        }
        let (ql, rest) = y.split_at_mut(128);
        let qh = &mut rest[..64];
        for (jj, j) in (0..QK_K).step_by(128).enumerate() {
            for k in 0..32 {
                let lu = |o: usize| l[j + k + o] as u8;
                let (q1, q2, q3, q4) = (lu(0) & 0xF, lu(32) & 0xF, lu(64) & 0xF, lu(96) & 0xF);
                ql[64 * jj + k] = q1 | (q3 << 4);
                ql[64 * jj + k + 32] = q2 | (q4 << 4);
                qh[32 * jj + k] = (lu(0) >> 4)
                    | ((lu(32) >> 4) << 2)
                    | ((lu(64) >> 4) << 4)
                    | ((lu(96) >> 4) << 6);
            }
        }
    }
}
