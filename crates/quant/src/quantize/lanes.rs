//! The K-quants' scale searches run on `L` sub-blocks side by side.
//!
//! ggml's searches (`make_qkx2_quants`, `make_qkx3_quants`,
//! `make_qx_quants`: [`super::common`]) run one sub-block of 16 or 32
//! weights at a time, and each candidate scale sums over the sub-block in
//! one chain of dependent float additions: the loop waits on the adder's
//! latency, not its throughput. A super-block's sub-blocks are independent,
//! so these functions run the same search on all of them at once: element
//! `i` of sub-block `k` is `x[i][k]`, and every statement is a loop over
//! the lanes `k` doing, in each lane, exactly the operation the scalar code
//! does, in the same order: each lane's sums are the scalar sums, bit for
//! bit (no reassociation, no FMA; Rust contracts nothing), and the lanes'
//! loops vectorize. A lane where the scalar code returns early (a
//! constant or all-zero sub-block) computes its discarded candidates like
//! the others and takes the early result at the end.
//!
//! The scalar functions stay the reference: the tests below compare every
//! lane with them on random and edge-case sub-blocks, and the convert
//! crate's tests compare whole rows with llama-quantize's.

use super::common::{nearest_int, GROUP_MAX_EPS};

/// Element `i` of sub-block `k` is `[i][k]`.
pub(crate) type Lanes<T, const N: usize, const L: usize> = [[T; L]; N];

/// Sub-blocks of `N` from `x` (`N·L` values, sub-block after sub-block)
/// into lanes.
#[inline(always)]
pub(crate) fn to_lanes<const N: usize, const L: usize>(x: &[f32]) -> Lanes<f32, N, L> {
    let mut t = [[0f32; L]; N];
    for k in 0..L {
        let xs = &x[N * k..N * k + N];
        for i in 0..N {
            t[i][k] = xs[i];
        }
    }
    t
}

/// Codes in lanes back to sub-block order (`out`: `N·L` values).
#[inline(always)]
pub(crate) fn from_lanes<T: Copy, const N: usize, const L: usize>(
    t: &Lanes<T, N, L>,
    out: &mut [T],
) {
    for k in 0..L {
        let o = &mut out[N * k..N * k + N];
        for i in 0..N {
            o[i] = t[i][k];
        }
    }
}

/// The search parameters of `make_qkx2_quants` / `make_qkx3_quants`.
#[derive(Clone, Copy)]
pub(crate) struct Search {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// `make_qkx2_quants` (`X3 = false`) or `make_qkx3_quants` (`X3 = true`)
/// on `L` sub-blocks of `N`: per lane the scale returned and `the_min`
/// (`-min`), the codes into `l_out`. Each lane equals the scalar function
/// on that sub-block with `nstep ≥ 1` (every caller's).
#[inline(always)]
pub(crate) fn make_qkx_lanes<const N: usize, const L: usize, const X3: bool>(
    p: Search,
    x: &Lanes<f32, N, L>,
    w: &Lanes<f32, N, L>,
    l_out: &mut Lanes<u8, N, L>,
) -> ([f32; L], [f32; L]) {
    let nmax = p.nmax;
    let nmaxf = nmax as f32;
    // range_and_sums, per lane.
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = [0f32; L];
    for k in 0..L {
        sum_x[k] = sum_w[k] * x[0][k];
    }
    for i in 1..N {
        for k in 0..L {
            let v = x[i][k];
            min[k] = if v < min[k] { v } else { min[k] };
            max[k] = if v > max[k] { v } else { max[k] };
            sum_w[k] += w[i][k];
            sum_x[k] += w[i][k] * v;
        }
    }
    for k in 0..L {
        if min[k] > 0.0 {
            min[k] = 0.0;
        }
    }
    let min0 = min;
    let mut iscale = [0f32; L];
    let mut scale = [0f32; L];
    for k in 0..L {
        iscale[k] = nmaxf / (max[k] - min[k]);
        scale[k] = 1.0 / iscale[k];
    }
    // The codes as floats (exact: 0..=nmax) until the end: no packing to
    // bytes and back in the loops.
    let mut lbest = [[0f32; L]; N];
    let mut best = [0f32; L];
    for i in 0..N {
        for k in 0..L {
            let l = nearest_int(iscale[k] * (x[i][k] - min[k])).clamp(0, nmax);
            lbest[i][k] = l as f32;
            let d = scale[k] * l as f32 + min[k] - x[i][k];
            let d = if p.use_mad { d.abs() } else { d * d };
            best[k] += w[i][k] * d;
        }
    }
    let mut laux = [[0f32; L]; N];
    for is in 0..=p.nstep {
        let num = p.rmin + p.rdelta * is as f32 + nmaxf;
        for k in 0..L {
            iscale[k] = num / (max[k] - min[k]);
        }
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; L], [0f32; L], [0f32; L]);
        for i in 0..N {
            for k in 0..L {
                let l = if X3 {
                    // C: `v > 0 ? nearest_int(MIN(v, nmax)) : 0`.
                    let v = iscale[k] * (x[i][k] - min[k]);
                    let c = nearest_int(if v < nmaxf { v } else { nmaxf });
                    if v > 0.0 {
                        c
                    } else {
                        0
                    }
                } else {
                    nearest_int(iscale[k] * (x[i][k] - min[k])).clamp(0, nmax)
                };
                let lf = l as f32;
                laux[i][k] = lf;
                let wl = w[i][k] * lf;
                sum_l[k] += wl;
                sum_l2[k] += wl * lf;
                sum_xl[k] += wl * x[i][k];
            }
        }
        let mut this_scale = [0f32; L];
        let mut this_min = [0f32; L];
        let mut ok = [false; L];
        for k in 0..L {
            let d = sum_w[k] * sum_l2[k] - sum_l[k] * sum_l[k];
            ok[k] = d > 0.0;
            let s = (sum_w[k] * sum_xl[k] - sum_x[k] * sum_l[k]) / d;
            let m = (sum_l2[k] * sum_x[k] - sum_l[k] * sum_xl[k]) / d;
            let clamp = m > 0.0;
            this_min[k] = if clamp { 0.0 } else { m };
            this_scale[k] = if clamp { sum_xl[k] / sum_l2[k] } else { s };
        }
        let mut err = [0f32; L];
        for i in 0..N {
            for k in 0..L {
                let d = this_scale[k] * laux[i][k] + this_min[k] - x[i][k];
                let d = if p.use_mad { d.abs() } else { d * d };
                err[k] += w[i][k] * d;
            }
        }
        let mut better = [false; L];
        for k in 0..L {
            better[k] = ok[k] && err[k] < best[k];
            if better[k] {
                best[k] = err[k];
                scale[k] = this_scale[k];
                min[k] = this_min[k];
            }
        }
        for i in 0..N {
            for k in 0..L {
                if better[k] {
                    lbest[i][k] = laux[i][k];
                }
            }
        }
    }
    for i in 0..N {
        for k in 0..L {
            l_out[i][k] = lbest[i][k] as u8;
        }
    }
    // The scalar code's early return: a constant sub-block (qkx2: max ==
    // min; qkx3: max <= min) gets zero codes, scale 0, its own min.
    let mut the_min = [0f32; L];
    for k in 0..L {
        let flat = if X3 {
            max[k] <= min0[k]
        } else {
            max[k] == min0[k]
        };
        if flat {
            scale[k] = 0.0;
            the_min[k] = -min0[k];
            for row in l_out.iter_mut() {
                row[k] = 0;
            }
        } else {
            the_min[k] = -min[k];
        }
    }
    (scale, the_min)
}

/// `make_qx_quants(nmax, x, L, 1, qw)` (rmse_type 1: weights `qw`, or
/// `x²` without) on `L` sub-blocks of `N`: per lane the scale, the codes
/// (offset by `nmax`) into `l_out`.
#[inline(always)]
pub(crate) fn make_qx1_lanes<const N: usize, const L: usize>(
    nmax: i32,
    x: &Lanes<f32, N, L>,
    qw: Option<&Lanes<f32, N, L>>,
    l_out: &mut Lanes<i8, N, L>,
) -> [f32; L] {
    let nmaxf = nmax as f32;
    let mut max = [0f32; L];
    let mut amax = [0f32; L];
    for i in 0..N {
        for k in 0..L {
            let ax = x[i][k].abs();
            if ax > amax[k] {
                amax[k] = ax;
                max[k] = x[i][k];
            }
        }
    }
    let weight = |i: usize, k: usize| match qw {
        Some(q) => q[i][k],
        None => x[i][k] * x[i][k],
    };
    let mut iscale = [0f32; L];
    for k in 0..L {
        iscale[k] = -nmaxf / max[k];
    }
    // The codes as floats (exact) until the end, as in make_qkx_lanes.
    let mut lbest = [[0f32; L]; N];
    let (mut sumlx, mut suml2) = ([0f32; L], [0f32; L]);
    for i in 0..N {
        for k in 0..L {
            let l = nearest_int(iscale[k] * x[i][k]).clamp(-nmax, nmax - 1);
            lbest[i][k] = l as f32;
            let w = weight(i, k);
            let lf = l as f32;
            sumlx[k] += w * x[i][k] * lf;
            suml2[k] += w * lf * lf;
        }
    }
    let mut scale = [0f32; L];
    let mut best = [0f32; L];
    for k in 0..L {
        scale[k] = if suml2[k] != 0.0 {
            sumlx[k] / suml2[k]
        } else {
            0.0
        };
        best[k] = scale[k] * sumlx[k];
    }
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let num = -(nmaxf + 0.1 * is as f32);
        for k in 0..L {
            iscale[k] = num / max[k];
        }
        let (mut sumlx, mut suml2) = ([0f32; L], [0f32; L]);
        let mut laux = [[0f32; L]; N];
        for i in 0..N {
            for k in 0..L {
                let l = nearest_int(iscale[k] * x[i][k]).clamp(-nmax, nmax - 1);
                let lf = l as f32;
                laux[i][k] = lf;
                let w = weight(i, k);
                sumlx[k] += w * x[i][k] * lf;
                suml2[k] += w * lf * lf;
            }
        }
        let mut better = [false; L];
        for k in 0..L {
            better[k] = suml2[k] > 0.0 && sumlx[k] * sumlx[k] > best[k] * suml2[k];
            if better[k] {
                scale[k] = sumlx[k] / suml2[k];
                best[k] = scale[k] * sumlx[k];
            }
        }
        for i in 0..N {
            for k in 0..L {
                if better[k] {
                    lbest[i][k] = laux[i][k];
                }
            }
        }
    }
    for i in 0..N {
        for k in 0..L {
            l_out[i][k] = (lbest[i][k] as i32 + nmax) as i8;
        }
    }
    for k in 0..L {
        if amax[k] < GROUP_MAX_EPS {
            scale[k] = 0.0;
            for row in l_out.iter_mut() {
                row[k] = 0;
            }
        }
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::super::common::{make_qkx2_quants, make_qkx3_quants, make_qx_quants};
    use super::*;

    /// Sub-blocks that exercise every branch: random magnitudes over many
    /// exponents, all-zero, constant, one outlier, subnormals, ties, -0,
    /// all-negative and all-positive ones.
    fn cases<const N: usize>(seed: u64, count: usize) -> Vec<[f32; N]> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            s.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut out = Vec::with_capacity(count);
        for c in 0..count {
            let mut b = [0f32; N];
            for v in b.iter_mut() {
                let r = next();
                let e = 100 + (r >> 58) as u32 % 40;
                *v = f32::from_bits(
                    ((r >> 32) as u32 & 0x8000_0000) | (e << 23) | (r as u32 & 0x7f_ffff),
                );
            }
            match c % 12 {
                0 => b = [0.0; N],
                1 => b = [0.25; N],
                2 => b[(c / 12) % N] = 1e6,
                3 => b
                    .iter_mut()
                    .for_each(|v| *v = f32::from_bits(next() as u32 & 0x807f_ffff)),
                4 => b
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = (i % 4) as f32 * 0.5),
                5 => b.iter_mut().for_each(|v| *v = -v.abs()),
                6 => b.iter_mut().for_each(|v| *v = v.abs() + 1.0),
                7 => {
                    b = [-0.0; N];
                    b[0] = 1e-20;
                }
                8 => b.iter_mut().for_each(|v| *v *= 1e-30),
                _ => {}
            }
            out.push(b);
        }
        out
    }

    fn weights<const N: usize>(x: &[f32; N], c: usize) -> [f32; N] {
        let mut w = [0f32; N];
        for i in 0..N {
            w[i] = match c % 4 {
                0 => x[i].abs(),
                1 => 1.0 + (i % 5) as f32 * 0.3,
                2 => {
                    if i % 3 == 0 {
                        0.0
                    } else {
                        x[i] * x[i] + 1e-12
                    }
                }
                _ => (i as f32 + 1.0) * 1e3,
            };
        }
        w
    }

    fn check_qkx<const N: usize, const L: usize, const X3: bool>(p: Search) {
        let xs = cases::<N>(0x51 + N as u64 + X3 as u64, L * 40);
        for (g, blocks) in xs.chunks_exact(L).enumerate() {
            let mut x = [[0f32; L]; N];
            let mut w = [[0f32; L]; N];
            let ws: Vec<[f32; N]> = blocks
                .iter()
                .enumerate()
                .map(|(k, b)| weights(b, g + k))
                .collect();
            for k in 0..L {
                for i in 0..N {
                    x[i][k] = blocks[k][i];
                    w[i][k] = ws[k][i];
                }
            }
            let mut l = [[0u8; L]; N];
            let (scale, the_min) = make_qkx_lanes::<N, L, X3>(p, &x, &w, &mut l);
            for k in 0..L {
                let (mut lr, mut laux) = ([0u8; N], [0u8; N]);
                let mut m = 0f32;
                let f = if X3 {
                    make_qkx3_quants
                } else {
                    make_qkx2_quants
                };
                let s = f(
                    p.nmax, &blocks[k], &ws[k], &mut lr, &mut m, &mut laux, p.rmin, p.rdelta,
                    p.nstep, p.use_mad,
                );
                let got: Vec<u8> = (0..N).map(|i| l[i][k]).collect();
                assert_eq!(
                    (scale[k].to_bits(), the_min[k].to_bits(), &got[..]),
                    (s.to_bits(), m.to_bits(), &lr[..]),
                    "group {g} lane {k}: {:?}",
                    blocks[k]
                );
            }
        }
    }

    #[test]
    fn qkx_lanes_equal_the_scalar_searches() {
        let q4 = Search {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let q5 = Search {
            nmax: 31,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: false,
        };
        let q2 = Search {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let x3 = |nmax| Search {
            nmax,
            rmin: -0.9,
            rdelta: 0.05,
            nstep: 36,
            use_mad: false,
        };
        // One super-block's sub-blocks and four's (k.rs's groups).
        check_qkx::<32, 8, false>(q4);
        check_qkx::<32, 32, false>(q4);
        check_qkx::<32, 8, false>(q5);
        check_qkx::<32, 32, false>(q5);
        check_qkx::<16, 16, false>(q2);
        check_qkx::<16, 64, false>(q2);
        check_qkx::<32, 8, true>(x3(15));
        check_qkx::<32, 32, true>(x3(15));
        check_qkx::<32, 8, true>(x3(31));
        check_qkx::<16, 16, true>(x3(3));
        check_qkx::<16, 64, true>(x3(3));
    }

    fn check_qx<const N: usize, const L: usize>(nmax: i32, with_weights: bool) {
        let xs = cases::<N>(0x77 + nmax as u64, L * 40);
        for (g, blocks) in xs.chunks_exact(L).enumerate() {
            let mut x = [[0f32; L]; N];
            let mut w = [[0f32; L]; N];
            let ws: Vec<[f32; N]> = blocks
                .iter()
                .enumerate()
                .map(|(k, b)| weights(b, g + k))
                .collect();
            for k in 0..L {
                for i in 0..N {
                    x[i][k] = blocks[k][i];
                    w[i][k] = ws[k][i];
                }
            }
            let mut l = [[0i8; L]; N];
            let scale = make_qx1_lanes::<N, L>(nmax, &x, with_weights.then_some(&w), &mut l);
            for k in 0..L {
                let mut lr = [0i8; N];
                let s = make_qx_quants(
                    nmax,
                    &blocks[k],
                    &mut lr,
                    1,
                    with_weights.then_some(&ws[k][..]),
                );
                let got: Vec<i8> = (0..N).map(|i| l[i][k]).collect();
                assert_eq!(
                    (scale[k].to_bits(), &got[..]),
                    (s.to_bits(), &lr[..]),
                    "group {g} lane {k}: {:?}",
                    blocks[k]
                );
            }
        }
    }

    #[test]
    fn qx_lanes_equal_the_scalar_search() {
        check_qx::<16, 16>(32, false);
        check_qx::<16, 64>(32, false);
        check_qx::<16, 16>(32, true);
        check_qx::<16, 64>(32, true);
        check_qx::<16, 16>(4, true);
        check_qx::<16, 64>(4, true);
    }
}
