//! The GPU's non-matmul kernels (gpack_gpu::ops) against this crate's own
//! CPU code (ops::rmsnorm, add_rmsnorm, Rope, silu, gelu_tanh, and the
//! attention of model/attention.rs composed from the same ops on an f16
//! cache), on random inputs and ragged sizes. Issue 43, "Kernels".
//!
//! Every test runs twice: on the device with `shader-f16` and subgroups
//! (where the adapter has them: lavapipe does) and with both withheld (the
//! `pack2x16float` cache and shared-memory reductions). Without a Vulkan,
//! Metal or DX12 adapter these tests fail: CI installs lavapipe.
//!
//! Tolerances (|gpu - cpu| ≤ abs + rel · |cpu|): the GPU sums in another
//! order and its `exp`/`tanh` are the driver's, not glibc's, so results
//! are not bit-equal; each test states its bound.

use gpack_gpu::ops::{self, AttnArgs, Buffer, Glu, KvLayer, Map, RopeArgs, Rows};
use gpack_gpu::{Allow, Gpu, Want};
use gpack_runtime::config::{RopeStyle, Yarn};
use gpack_runtime::ops as cpu;
use gpack_runtime::ops::Rope;
use std::sync::OnceLock;

/// The two devices every test runs on: all features, and none.
fn gpus() -> &'static [Gpu; 2] {
    static G: OnceLock<[Gpu; 2]> = OnceLock::new();
    G.get_or_init(|| {
        let open = |allow| {
            Gpu::open_with(Want::Any, allow)
                .expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers libvulkan1)")
        };
        [
            open(Allow::default()),
            open(Allow {
                f16: false,
                subgroups: false,
                ..Default::default()
            }),
        ]
    })
}

fn name(g: &Gpu) -> String {
    format!("f16={} subgroups={}", g.caps().f16, g.caps().subgroups)
}

/// A deterministic stream of values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn f(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
}

fn up(g: &Gpu, x: &[f32]) -> Buffer {
    g.upload("test", bytemuck::cast_slice(x)).unwrap()
}

fn up_u32(g: &Gpu, x: &[u32]) -> Buffer {
    g.upload("test", bytemuck::cast_slice(x)).unwrap()
}

fn read(g: &Gpu, b: &Buffer, n: usize) -> Vec<f32> {
    g.read_f32(b, n).unwrap()
}

/// Asserts `|got - want| ≤ abs + rel · |want|` element by element and
/// returns the largest difference seen.
#[track_caller]
fn close(got: &[f32], want: &[f32], abs: f32, rel: f32, what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst = 0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        assert!(
            d <= abs + rel * w.abs(),
            "{what}: element {i}: gpu {g} vs cpu {w} (diff {d})"
        );
        worst = worst.max(d);
    }
    worst
}

/// RMS norm with and without weight, plain rows and heads inside wider
/// rows (in place, the q/k norms), and the residual add through a
/// post-norm: within 2e-6 + 2e-5 relative of ops::rmsnorm / rms_inv /
/// add_rmsnorm.
#[test]
fn rmsnorm_matches_cpu() {
    let mut r = Rng(1);
    for g in gpus() {
        for (n, d) in [(1, 1), (3, 63), (2, 64), (5, 65), (4, 576), (1, 2049)] {
            let what = format!("{} n={n} d={d}", name(g));
            let x = r.vec(n * d, 3.0);
            let w = r.vec(d, 2.0);
            let eps = 1e-6;
            let (xb, wb) = (up(g, &x), up(g, &w));
            let out = g.storage("out", (n * d * 4) as u64).unwrap();
            // Weighted.
            ops::rmsnorm(g, &xb, Rows::dense(n, d), Some(&wb), eps, &out).unwrap();
            let mut want = vec![0f32; n * d];
            for t in 0..n {
                let s = t * d..(t + 1) * d;
                cpu::rmsnorm(&mut want[s.clone()], &x[s], &w, eps);
            }
            close(&read(g, &out, n * d), &want, 2e-6, 2e-5, &what);
            // Weightless (rms_inv's scaling).
            ops::rmsnorm(g, &xb, Rows::dense(n, d), None, eps, &out).unwrap();
            for t in 0..n {
                let s = t * d..(t + 1) * d;
                let inv = cpu::rms_inv(&x[s.clone()], eps);
                want[s.clone()]
                    .iter_mut()
                    .zip(&x[s])
                    .for_each(|(o, &v)| *o = v * inv);
            }
            close(&read(g, &out, n * d), &want, 2e-6, 2e-5, &what);
            // Residual through a post-norm.
            let base = r.vec(n * d, 1.0);
            let xr = up(g, &base);
            ops::add_rmsnorm(g, &xr, &xb, &wb, n, d, eps).unwrap();
            let mut want = base.clone();
            for t in 0..n {
                let s = t * d..(t + 1) * d;
                cpu::add_rmsnorm(&mut want[s.clone()], &x[s], &w, eps);
            }
            close(&read(g, &xr, n * d), &want, 2e-6, 2e-5, &what);
        }
        // Per-head norms of the q heads inside q‖k‖v rows, in place.
        let (n_tok, heads, hd, width) = (3, 4, 80, 4 * 80 + 2 * 2 * 80);
        let qkv = r.vec(n_tok * width, 2.0);
        let w = r.vec(hd, 1.5);
        let b = up(g, &qkv);
        let rows = Rows::heads(n_tok, heads, hd, 0, width);
        ops::rmsnorm_inplace(g, &b, rows, Some(&up(g, &w)), 1e-5).unwrap();
        let mut want = qkv.clone();
        for t in 0..n_tok {
            want[t * width..t * width + heads * hd]
                .chunks_exact_mut(hd)
                .for_each(|h| cpu::rmsnorm_inplace(h, &w, 1e-5));
        }
        close(&read(g, &b, qkv.len()), &want, 2e-6, 2e-5, &name(g));
    }
}

/// The residual add (with granite's scale), the embedding-row scale, the
/// final soft-cap and the logit divide: within 1e-6 + 2e-6 relative.
#[test]
fn elementwise_matches_cpu() {
    let mut r = Rng(2);
    for g in gpus() {
        for n in [1usize, 63, 64, 1000, 70_001] {
            let what = format!("{} n={n}", name(g));
            let x = r.vec(n, 40.0);
            let o = r.vec(n, 4.0);
            let (xb, ob) = (up(g, &x), up(g, &o));
            ops::add(g, &xb, &ob, n, 0.22).unwrap();
            let want: Vec<f32> = x.iter().zip(&o).map(|(x, o)| x + o * 0.22).collect();
            close(&read(g, &xb, n), &want, 1e-6, 2e-6, &what);
            for f in [
                Map::Scale(24.0f32.sqrt()),
                Map::Softcap(30.0),
                Map::Divide(8.0),
            ] {
                let b = up(g, &x);
                ops::map(g, &b, n, f).unwrap();
                let want: Vec<f32> = x
                    .iter()
                    .map(|&v| match f {
                        Map::Scale(s) => v * s,
                        Map::Softcap(cap) => cap * (v / cap).tanh(),
                        Map::Divide(d) => v / d,
                    })
                    .collect();
                close(&read(g, &b, n), &want, 1e-6, 2e-6, &format!("{what} {f:?}"));
            }
        }
    }
}

/// The routed experts' scatter (`dst[t] += w · src[i]`, model/moe.rs's
/// loop): one multiply-add per element, as the CPU's `o += w * y`, so
/// within 1 ulp-scale (1e-6 + 1e-6 relative: the driver may fuse it).
#[test]
fn add_rows_matches_cpu() {
    let mut r = Rng(9);
    for g in gpus() {
        for (d, n_dst, pairs) in [
            (1usize, 3usize, vec![(0usize, 2usize)]),
            (67, 9, vec![(0, 4), (1, 0), (2, 8)]),
            (2048, 5, vec![(3, 1), (0, 3)]),
        ] {
            let src = r.vec(4 * d, 3.0);
            let dst = r.vec(n_dst * d, 3.0);
            let rows: Vec<(usize, usize, f32)> =
                pairs.iter().map(|&(i, t)| (i, t, r.f())).collect();
            let (sb, db) = (up(g, &src), up(g, &dst));
            ops::add_rows(g, &sb, &db, d, &rows).unwrap();
            let mut want = dst.clone();
            for &(i, t, w) in &rows {
                for j in 0..d {
                    want[t * d + j] += w * src[i * d + j];
                }
            }
            close(
                &read(g, &db, n_dst * d),
                &want,
                1e-6,
                1e-6,
                &format!("{} d={d}", name(g)),
            );
        }
    }
}

/// SwiGLU, GeGLU and gpt-oss's clamped SwiGLU over gate‖up rows, against
/// ops::silu / ops::gelu_tanh (and the clamped formula of
/// model/step.rs), including large gates: within 1e-6 + 1e-5 relative
/// + 1e-6 · |g · u|.
#[test]
fn glu_matches_cpu() {
    let mut r = Rng(3);
    let (alpha, limit) = gpack_runtime::config::SWIGLU_OAI;
    for g in gpus() {
        for (n, ff) in [(1, 1), (5, 67), (2, 1536)] {
            let mut gu = r.vec(n * 2 * ff, 6.0);
            gu[0] = 95.0;
            if ff > 2 {
                gu[1] = -95.0;
            }
            let b = up(g, &gu);
            let h = g.storage("h", (n * ff * 4) as u64).unwrap();
            for act in [Glu::Silu, Glu::GeluTanh, Glu::SwigluOai] {
                ops::glu(g, act, &b, n, ff, &h).unwrap();
                let mut want = vec![0f32; n * ff];
                for t in 0..n {
                    let (gs, us) = gu[t * 2 * ff..(t + 1) * 2 * ff].split_at(ff);
                    for j in 0..ff {
                        let (x, u) = (gs[j], us[j]);
                        want[t * ff + j] = match act {
                            Glu::Silu => cpu::silu(x) * u,
                            Glu::GeluTanh => cpu::gelu_tanh(x) * u,
                            Glu::SwigluOai => {
                                let x = x.min(limit);
                                let u = u.clamp(-limit, limit);
                                (u + 1.0) * (x / (1.0 + (-alpha * x).exp()))
                            }
                        };
                    }
                }
                let what = format!("{} {act:?} n={n} ff={ff}", name(g));
                let got = read(g, &h, n * ff);
                for (i, (&x, &w)) in got.iter().zip(&want).enumerate() {
                    // GeGLU's `1 + tanh(·)` cancels for negative gates: an
                    // ulp of tanh near -1 is 1e-7 of |g · u|.
                    let (t, j) = (i / ff, i % ff);
                    let gu_mag = (gu[t * 2 * ff + j] * gu[t * 2 * ff + ff + j]).abs();
                    let bound = 1e-6 + 1e-5 * w.abs() + 1e-6 * gu_mag;
                    assert!(
                        (x - w).abs() <= bound,
                        "{what}: element {i}: gpu {x} vs cpu {w}"
                    );
                }
            }
        }
    }
}

/// RoPE of the q and k heads inside q‖k‖v rows with the host's table
/// (Rope::cos_sin per position): normal and NeoX, partial rotary
/// (n_rot < head_dim), linear and YaRN scaling, positions up to 40 000:
/// within 1e-6 + 1e-6 relative of Rope::apply.
#[test]
fn rope_matches_cpu() {
    let mut r = Rng(4);
    let yarn = Yarn {
        factor: 4.0,
        n_ctx_orig: 4096,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attn_factor: 1.1,
        exact_range: false,
    };
    for g in gpus() {
        for (hd, n_rot) in [(64, 64), (128, 32), (256, 256), (80, 40)] {
            for style in [RopeStyle::Normal, RopeStyle::Neox] {
                let ropes = [
                    Rope::new(n_rot, 10000.0, 1.0, style, None),
                    Rope::new(n_rot, 500000.0, 0.25, style, None),
                    Rope::yarn(n_rot, 10000.0, style, &yarn),
                ];
                for rope in &ropes {
                    let (n_head, n_kv) = (4, 2);
                    let width = (n_head + 2 * n_kv) * hd;
                    let positions = [0usize, 1, 7, 1000, 40_000];
                    let n_tok = positions.len();
                    let x = r.vec(n_tok * width, 2.0);
                    let mut cs = vec![0f32; n_tok * n_rot];
                    for (t, &p) in positions.iter().enumerate() {
                        rope.cos_sin(p, &mut cs[t * n_rot..(t + 1) * n_rot]);
                    }
                    let b = up(g, &x);
                    let args = RopeArgs {
                        n_tok,
                        n_heads: n_head + n_kv,
                        head_dim: hd,
                        n_rot,
                        neox: style == RopeStyle::Neox,
                        off: 0,
                        stride: width,
                    };
                    ops::rope(g, &b, &up(g, &cs), args).unwrap();
                    let mut want = x.clone();
                    for t in 0..n_tok {
                        let qk = &mut want[t * width..t * width + (n_head + n_kv) * hd];
                        rope.apply(qk, hd, &cs[t * n_rot..(t + 1) * n_rot]);
                    }
                    let what = format!("{} hd={hd} n_rot={n_rot} {style:?}", name(g));
                    close(&read(g, &b, x.len()), &want, 1e-6, 1e-6, &what);
                }
            }
        }
    }
}

/// f16 bits as the CPU's f16 cache stores them.
fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The CPU's attention for one query row at position `p` of one sequence,
/// composed from the ops model/attention.rs runs on an f16 cache: scores
/// with ops::scores_transposed over the transposed keys of the KV head,
/// the soft-cap `cap · tanh(s / cap)`, ops::softmax or
/// gpack_quant's softmax_rows_sinks, then ops::weighted_rows over the
/// values. `kt[kvh]` is `[hd][n_ctx]`, `vr[kvh]` is `[n_ctx][hdv]`, both
/// f16 bits.
#[allow(clippy::too_many_arguments)]
fn cpu_attention(
    q: &[f32],
    kt: &[Vec<u16>],
    vr: &[Vec<u16>],
    n_ctx: usize,
    (n_head, hd, hdv): (usize, usize, usize),
    p: usize,
    a: &AttnArgs,
    sinks: Option<&[f32]>,
) -> Vec<f32> {
    let group = n_head / kt.len();
    let start = a.window.map_or(0, |w| (p + 1).saturating_sub(w));
    let len = p + 1 - start;
    let mut out = vec![0f32; n_head * hdv];
    for h in 0..n_head {
        let kvh = h / group;
        let mut sc = vec![0f32; len];
        cpu::scores_transposed(
            &q[h * hd..(h + 1) * hd],
            a.scale,
            &kt[kvh],
            n_ctx,
            start,
            &mut sc,
        );
        if let Some(cap) = a.softcap {
            sc.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
        }
        match sinks {
            Some(s) => {
                gpack_quant::kernels::attn::softmax_rows_sinks(&mut sc, len, len, 1, &s[h..])
            }
            None => cpu::softmax(&mut sc),
        }
        cpu::weighted_rows(
            &sc,
            &vr[kvh][start * hdv..],
            hdv,
            &mut out[h * hdv..(h + 1) * hdv],
        );
    }
    out
}

/// One attention configuration.
#[derive(Clone, Copy, Debug)]
struct Case {
    hd: usize,
    hdv: usize,
    n_head_kv: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    sinks: bool,
    /// Positions in the cache before the prefill.
    history: usize,
}

/// Runs `c` on `g`: the history's K/V appended, a prefill of 5 rows, then
/// a decode row, each attention step compared with [`cpu_attention`];
/// returns the largest difference.
fn attention_case(g: &Gpu, c: Case, r: &mut Rng) -> f32 {
    let n_head = 4;
    let (hd, hdv, n_kv) = (c.hd, c.hdv, c.n_head_kv);
    let (qd, kd, vd) = (n_head * hd, n_kv * hd, n_kv * hdv);
    let width = qd + kd + vd;
    let steps = [c.history, 5, 1];
    let total: usize = steps.iter().sum();
    let n_ctx = total + 3;
    let kv = KvLayer::new(g, n_ctx, n_kv, hd, hdv).unwrap();
    // The CPU's cache: keys transposed per KV head, values by position.
    let mut kt = vec![vec![0u16; hd * n_ctx]; n_kv];
    let mut vr = vec![vec![0u16; n_ctx * hdv]; n_kv];
    let sinks: Option<Vec<f32>> = c.sinks.then(|| r.vec(n_head, 3.0));
    let sinks_b = sinks.as_ref().map(|s| up(g, s));
    let args = |n_tok| AttnArgs {
        n_tok,
        n_head,
        q_off: 0,
        q_stride: width,
        scale: 1.0 / (hd as f32).sqrt(),
        softcap: c.softcap,
        window: c.window,
    };
    let mut worst = 0f32;
    let mut p0 = 0;
    for (step, &n) in steps.iter().enumerate() {
        if n == 0 {
            continue;
        }
        // Queries sharp enough that the softmax is far from uniform.
        let mut qkv = r.vec(n * width, 1.0);
        for t in 0..n {
            qkv[t * width..t * width + qd]
                .iter_mut()
                .for_each(|v| *v *= 8.0);
        }
        let pos: Vec<u32> = (p0..p0 + n).map(|p| p as u32).collect();
        let (qb, pb) = (up(g, &qkv), up_u32(g, &pos));
        kv.append(g, &qb, &pb, n, qd, qd + kd, width).unwrap();
        for t in 0..n {
            let row = &qkv[t * width..(t + 1) * width];
            let p = p0 + t;
            for h in 0..n_kv {
                for d in 0..hd {
                    kt[h][d * n_ctx + p] = f16_bits(row[qd + h * hd + d]);
                }
                for d in 0..hdv {
                    vr[h][p * hdv + d] = f16_bits(row[qd + kd + h * hdv + d]);
                }
            }
        }
        // The history is only stored; the prefill and decode rows attend.
        if step > 0 {
            let out = g.storage("att", (n * n_head * hdv * 4) as u64).unwrap();
            ops::attention(g, &kv, &qb, &pb, args(n), sinks_b.as_ref(), &out).unwrap();
            let got = read(g, &out, n * n_head * hdv);
            for t in 0..n {
                let want = cpu_attention(
                    &qkv[t * width..t * width + qd],
                    &kt,
                    &vr,
                    n_ctx,
                    (n_head, hd, hdv),
                    p0 + t,
                    &args(n),
                    sinks.as_deref(),
                );
                let what = format!("{} {c:?} step {step} row {t}", name(g));
                let w = close(
                    &got[t * n_head * hdv..(t + 1) * n_head * hdv],
                    &want,
                    5e-6,
                    5e-5,
                    &what,
                );
                worst = worst.max(w);
            }
        }
        p0 += n;
    }
    // The device's cache holds the CPU's f16 values: the same bits, or one
    // ulp apart (WGSL leaves the rounding of f32 → f16 to the driver).
    let kb = g
        .read(kv.keys(), 0, (n_kv * n_ctx * hd * 2) as u64)
        .unwrap();
    let kg: Vec<u16> = bytemuck::pod_collect_to_vec(&kb);
    for h in 0..n_kv {
        for p in 0..total {
            for d in 0..hd {
                let (a, b) = (kg[(h * n_ctx + p) * hd + d], kt[h][d * n_ctx + p]);
                assert!(
                    a.abs_diff(b) <= 1,
                    "{} {c:?}: key h{h} p{p} d{d}: {a:#x} vs {b:#x}",
                    name(g)
                );
            }
        }
    }
    worst
}

/// Attention over the device's f16 cache against the CPU's, for head dims
/// 64/128/256 and ragged 80 (values 48 wide in one case), 4 query heads
/// over 1, 2 and 4 KV heads, windows shorter than the context, soft-cap
/// and sinks on and off, histories of 0, 37 and 130 positions (several
/// 64-position tiles), a prefill of 5 rows then a decode row: within
/// 5e-6 + 5e-5 relative (values are in [-1, 1]; lavapipe: 1e-6 at most).
#[test]
fn attention_matches_cpu() {
    let mut r = Rng(5);
    let mut cases = Vec::new();
    let dims = [(64, 64), (128, 128), (256, 256), (80, 80), (80, 48)];
    let mut i = 0;
    for n_head_kv in [1, 2, 4] {
        for window in [None, Some(9)] {
            for softcap in [None, Some(3.0)] {
                for sinks in [false, true] {
                    let (hd, hdv) = dims[i % dims.len()];
                    cases.push(Case {
                        hd,
                        hdv,
                        n_head_kv,
                        window,
                        softcap,
                        sinks,
                        history: [0, 37, 130][i % 3],
                    });
                    i += 1;
                }
            }
        }
    }
    for g in gpus() {
        let mut worst = 0f32;
        for &c in &cases {
            worst = worst.max(attention_case(g, c, &mut r));
        }
        eprintln!("attention {}: largest difference {worst:e}", name(g));
    }
}
