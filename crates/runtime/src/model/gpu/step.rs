//! One step's blocks (and head) on the device: `model/step.rs`'s block
//! graph, kernel for kernel (`gpack_gpu::ops` are the twins of the CPU's
//! ops, tested against them in tests/gpu_ops.rs).
//!
//! Per step the host uploads the residual rows after the embedding lookup
//! (`[n][n_embd]`), the rotary tables (`[n][n_rot]`, global and
//! sliding-window) and each sequence's positions; it reads back the logits
//! of the rows asked for and the residual rows (`[n][n_embd]`: the hidden
//! states the host's API hands out, and the input of the CPU's blocks when
//! the model is split). Everything else stays on the device.
//!
//! Several sequences in one step share every matmul (one pass over the
//! weights for all their rows); attention runs per sequence over its own
//! cache, into a buffer of its own rows copied into place.
//!
//! Submissions: every kernel, copy and clear of a step is recorded into the
//! device's one pending encoder (`gpack_gpu::Gpu`'s policy) and submitted
//! by the read-back at its end: one submission per step for the dense
//! families; a MoE layer adds one (its router reads the normed rows back
//! mid-step). `GpuInfo::last_step_submissions` reports the count. Each
//! kernel still has its own uniform and bind group.

use super::weights::GpuProj;
use super::{GpuBlock, GpuFfn, GpuModel, GpuMoe};
use crate::config::{Activation, Config, RopeStyle};
use crate::error::{Error, Result};
use crate::model::moe::route_rows;
use crate::model::Ffn;
use crate::model::{Model, Scratch, Sequence};
use gpack_gpu::matvec::Out;
use gpack_gpu::ops::{self, AttnArgs, Buffer, Glu, KvLayer, Map, RopeArgs, Rows};
use gpack_gpu::Gpu;
use gpack_gpu::GpuMatrix;

type GResult<T> = std::result::Result<T, gpack_gpu::Error>;

/// One sequence's f16 KV caches on the device, one per GPU block, and the
/// positions of its rows in the current step.
#[derive(Debug)]
pub(crate) struct GpuKv {
    layers: Vec<KvLayer>,
    /// `[rows]` u32 positions of this sequence's rows in the step.
    pos: Buffer,
    pos_cap: usize,
    n_ctx: usize,
}

impl GpuKv {
    fn new(g: &Gpu, c: &Config, n_ctx: usize, blocks: usize) -> GResult<GpuKv> {
        let layers = (0..blocks)
            .map(|_| KvLayer::new(g, n_ctx, c.n_head_kv, c.head_dim, c.head_dim_v))
            .collect::<GResult<Vec<_>>>()?;
        Ok(GpuKv {
            layers,
            pos: g.storage("positions", 4)?,
            pos_cap: 1,
            n_ctx,
        })
    }

    fn fits(&self, n_ctx: usize, blocks: usize) -> bool {
        self.n_ctx == n_ctx && self.layers.len() == blocks
    }

    fn set_positions(&mut self, g: &Gpu, pos: &[usize]) -> GResult<()> {
        if self.pos_cap < pos.len() {
            self.pos_cap = pos.len().next_power_of_two();
            self.pos = g.storage("positions", self.pos_cap as u64 * 4)?;
        }
        let p: Vec<u32> = pos.iter().map(|&p| p as u32).collect();
        g.write_u32(&self.pos, 0, &p);
        Ok(())
    }
}

/// A step's buffers on the device, grown to the largest step seen.
#[derive(Debug)]
pub(crate) struct GpuScratch {
    /// Rows the row buffers hold.
    cap: usize,
    /// Rows of logits the head buffers hold.
    head_cap: usize,
    /// `[rows][n_embd]` residual stream.
    x: Buffer,
    /// `[rows][n_embd]` normed input of a projection.
    xb: Buffer,
    /// `[rows][q_dim + k_dim + v_dim]` q‖k‖v.
    qkv: Buffer,
    /// `[rows][n_head · head_dim_v]` attention output.
    att: Buffer,
    /// `[rows][n_head · head_dim_v]` one sequence's attention output (a
    /// step of several).
    att1: Buffer,
    /// `[rows][n_embd]` block output before the residual add.
    out: Buffer,
    /// `[rows][2 · n_ff]` gate‖up.
    gu: Buffer,
    /// `[rows][n_ff]` activated FFN hidden.
    hb: Buffer,
    /// `[rows][n_embd]` one expert's input rows and output rows (MoE).
    moe_x: Buffer,
    moe_y: Buffer,
    /// `[rows][n_rot]` cos/sin pairs of global and sliding-window layers.
    cs_global: Buffer,
    cs_swa: Buffer,
    /// `[head rows][n_embd]` normed rows of the head.
    hx: Buffer,
    /// `[head rows][n_vocab]` logits.
    logits: Buffer,
}

/// The step buffers' names, in the order of [`GpuScratch::floats`].
const SCRATCH: [&str; 14] = [
    "x",
    "xb",
    "qkv",
    "att",
    "att1",
    "out",
    "gu",
    "hb",
    "moe_x",
    "moe_y",
    "cs_global",
    "cs_swa",
    "hx",
    "logits",
];

impl GpuScratch {
    /// The f32 values of each buffer ([`SCRATCH`] order) for `rows` rows
    /// and `head` rows of logits: what [`GpuScratch::new`] allocates and
    /// the memory plan counts.
    pub(super) fn floats(
        c: &Config,
        ff: usize,
        moe: bool,
        rows: usize,
        head: usize,
    ) -> [usize; 14] {
        let moe_rows = if moe { rows } else { 0 };
        let att_w = c.n_head * c.head_dim_v;
        [
            rows * c.n_embd,
            rows * c.n_embd,
            rows * (c.q_dim() + c.k_dim() + c.v_dim()),
            rows * att_w,
            rows * att_w,
            rows * c.n_embd,
            rows * 2 * ff,
            rows * ff,
            moe_rows * c.n_embd,
            moe_rows * c.n_embd,
            rows * c.n_rot,
            rows * c.n_rot,
            head * c.n_embd,
            head * c.n_vocab,
        ]
    }

    fn new(
        g: &Gpu,
        c: &Config,
        ff: usize,
        moe: bool,
        rows: usize,
        head: usize,
    ) -> GResult<GpuScratch> {
        let f = GpuScratch::floats(c, ff, moe, rows, head);
        let mut bufs = Vec::with_capacity(f.len());
        for (name, n) in SCRATCH.iter().zip(f) {
            bufs.push(g.storage(&format!("step buffer {name}"), (n.max(1) * 4) as u64)?);
        }
        let mut it = bufs.into_iter();
        let mut next = || it.next().expect("one buffer per name");
        Ok(GpuScratch {
            cap: rows,
            head_cap: head,
            x: next(),
            xb: next(),
            qkv: next(),
            att: next(),
            att1: next(),
            out: next(),
            gu: next(),
            hb: next(),
            moe_x: next(),
            moe_y: next(),
            cs_global: next(),
            cs_swa: next(),
            hx: next(),
            logits: next(),
        })
    }
}

fn glu_of(a: Activation) -> Glu {
    match a {
        Activation::Silu => Glu::Silu,
        Activation::GeluTanh => Glu::GeluTanh,
        Activation::SwigluOai => Glu::SwigluOai,
    }
}

/// `x += norm(out)` (granite's `residual_scale` on `out` first), as
/// `Model::residual`.
fn residual(g: &Gpu, c: &Config, b: &GpuScratch, n: usize, norm: Option<&Buffer>) -> GResult<()> {
    let d = c.n_embd;
    match norm {
        Some(w) => {
            if let Some(r) = c.residual_scale {
                ops::map(g, &b.out, n * d, Map::Scale(r))?;
            }
            ops::add_rmsnorm(g, &b.x, &b.out, w, n, d, c.rms_eps)
        }
        None => ops::add(g, &b.x, &b.out, n * d, c.residual_scale.unwrap_or(1.0)),
    }
}

/// `xb = rmsnorm(x) · w` for `n` rows, or `x` itself without a norm.
fn normed<'b>(
    g: &Gpu,
    c: &Config,
    b: &'b GpuScratch,
    n: usize,
    w: Option<&Buffer>,
) -> GResult<&'b Buffer> {
    match w {
        Some(w) => {
            ops::rmsnorm(g, &b.x, Rows::dense(n, c.n_embd), Some(w), c.rms_eps, &b.xb)?;
            Ok(&b.xb)
        }
        None => Ok(&b.x),
    }
}

/// `out = down · act(gate_up · x)` for `n` rows of `x` (`model::step`'s
/// dense FFN), through `b.gu` and `b.hb`.
#[allow(clippy::too_many_arguments)]
fn dense_ffn(
    g: &Gpu,
    c: &Config,
    b: &GpuScratch,
    gate_up: &GpuProj,
    down: &GpuMatrix,
    x: &Buffer,
    n: usize,
    out: &Buffer,
) -> GResult<()> {
    gate_up.matmul(g, x, n, &b.gu)?;
    ops::glu(g, glu_of(c.activation), &b.gu, n, down.cols(), &b.hb)?;
    gpack_gpu::matmul(g, down, &b.hb, n, out)
}

/// The routed experts (and shared ones) of one layer into `b.out`, as
/// `Model::moe`: `routes[e]` holds expert `e`'s (row, weight) pairs; each
/// routed expert runs once on its rows (gathered into `b.moe_x`), and its
/// weighted outputs are added into their rows in increasing expert order.
fn moe_ffn(
    g: &Gpu,
    c: &Config,
    b: &GpuScratch,
    moe: &GpuMoe,
    routes: &[Vec<(usize, f32)>],
    x: &Buffer,
    n: usize,
) -> GResult<()> {
    let d = c.n_embd;
    g.clear_f32(&b.out, 0, n * d)?;
    for (e, rows) in routes.iter().enumerate() {
        let m = rows.len();
        if m == 0 {
            continue;
        }
        let [gate, up, down] = &moe.experts[e];
        let ff = down.cols();
        let gather: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, &(t, _))| (t * d, i * d, d))
            .collect();
        g.copy_f32(x, &b.moe_x, &gather)?;
        let half = |col0| Out {
            stride: 2 * ff,
            col0,
        };
        gpack_gpu::matmul_into(g, gate, &b.moe_x, m, &b.gu, half(0))?;
        gpack_gpu::matmul_into(g, up, &b.moe_x, m, &b.gu, half(ff))?;
        let bias = moe.bias.as_ref().map(|v| &v[e]);
        if let Some((gu, _)) = bias {
            ops::add_bias(g, &b.gu, gu, m, 2 * ff)?;
        }
        ops::glu(g, glu_of(c.activation), &b.gu, m, ff, &b.hb)?;
        gpack_gpu::matmul(g, down, &b.hb, m, &b.moe_y)?;
        if let Some((_, db)) = bias {
            ops::add_bias(g, &b.moe_y, db, m, d)?;
        }
        let scatter: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, &(t, w))| (i, t, w))
            .collect();
        ops::add_rows(g, &b.moe_y, &b.out, d, &scatter)?;
    }
    if let Some((gate_up, down)) = &moe.shared {
        dense_ffn(g, c, b, gate_up, down, x, n, &b.moe_y)?;
        ops::add(g, &b.out, &b.moe_y, n * d, 1.0)?;
    }
    Ok(())
}

impl Model<'_> {
    /// The device's part of a step: its blocks on the `n` rows of `s.x`
    /// (looked up, with their rotary tables and positions, by the caller),
    /// then the head when it is on the device. Returns whether the logits
    /// of `s.head_rows` are in `s.logits`; `s.x` holds the residual rows
    /// after the device's last block.
    pub(in crate::model) fn gpu_blocks(
        &self,
        g: &GpuModel,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        n: usize,
    ) -> Result<bool> {
        g.count_step();
        let before = g.gpu.submissions();
        let r = self.gpu_blocks_on(g, s, seqs, tokens, n);
        if r.is_err() {
            // Its half-recorded commands must not run before the next step's.
            g.gpu.discard();
        }
        g.step_done(before);
        r.map_err(|source| match g.lost() {
            Some(why) => Error::Gpu {
                what: format!("running a step: {why}"),
                source,
            },
            None => Error::Gpu {
                what: "running a step".into(),
                source,
            },
        })
    }

    fn gpu_blocks_on(
        &self,
        gm: &GpuModel,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        n: usize,
    ) -> GResult<bool> {
        let g = &*gm.gpu;
        let c = &self.config;
        let (d, r) = (c.n_embd, c.n_rot);
        let m = match gm.head {
            Some(_) => s.head_rows.len(),
            None => 0,
        };
        let grow = s.gpu.as_ref().is_none_or(|b| b.cap < n || b.head_cap < m);
        if grow {
            let (cap, head_cap) = s.gpu.as_ref().map_or((0, 0), |b| (b.cap, b.head_cap));
            let ff = gm.blocks.iter().map(|b| b.ffn.width()).max().unwrap_or(0);
            let moe = gm.blocks.iter().any(|b| matches!(b.ffn, GpuFfn::Moe(_)));
            s.gpu = Some(GpuScratch::new(g, c, ff, moe, cap.max(n), head_cap.max(m))?);
        }
        let b = s.gpu.as_ref().expect("made above");
        g.write_f32(&b.x, 0, &s.x[..n * d]);
        g.write_f32(&b.cs_global, 0, &s.cs_global[..n * r]);
        g.write_f32(&b.cs_swa, 0, &s.cs_swa[..n * r]);

        // Each sequence's caches (made at its first step) and positions.
        let mut spans = Vec::with_capacity(seqs.len());
        let mut row0 = 0;
        for (q, t) in seqs.iter_mut().zip(tokens) {
            if !q.gpu.as_ref().is_some_and(|k| k.fits(q.n_ctx, gm.blocks())) {
                q.gpu = Some(GpuKv::new(g, c, q.n_ctx, gm.blocks())?);
            }
            let kv = q.gpu.as_mut().expect("made above");
            kv.set_positions(g, &s.row_pos[row0..row0 + t.len()])?;
            spans.push((row0, t.len()));
            row0 += t.len();
        }

        for (l, blk) in gm.blocks.iter().enumerate() {
            self.gpu_attention_half(g, blk, b, seqs, &spans, l, n)?;
            residual(g, c, b, n, blk.post_attn_norm.as_ref())?;
            // ---- feed-forward ----
            let input = normed(g, c, b, n, blk.ffn_norm.as_ref())?;
            match &blk.ffn {
                GpuFfn::Dense { gate_up, down } => {
                    dense_ffn(g, c, b, gate_up, down, input, n, &b.out)?
                }
                GpuFfn::Moe(moe) => {
                    let Ffn::Moe(f) = &self.layers[l].ffn else {
                        unreachable!("the device's FFN follows the layer's")
                    };
                    if l == c.n_dense_lead {
                        if let Some(store) = &self.experts {
                            store.count_tokens(n);
                        }
                    }
                    // The router on the host, on the device's normed rows:
                    // the CPU's routing rule, bit for bit on those rows.
                    let x = g.read_f32(input, n * c.n_embd)?;
                    route_rows(c, f, &x, n, &mut s.routes, &mut s.probs, &mut s.select);
                    moe_ffn(g, c, b, moe, &s.routes, input, n)?;
                }
            }
            residual(g, c, b, n, blk.post_ffn_norm.as_ref())?;
        }

        let mut logits = false;
        if let Some(h) = &gm.head {
            logits = true;
            let rows = &s.head_rows;
            s.logits.clear();
            if m > 0 {
                if rows.windows(2).all(|w| w[1] == w[0] + 1) {
                    let sel = Rows {
                        n: m,
                        d,
                        per_tok: 1,
                        off: rows[0] * d,
                        stride: d,
                    };
                    ops::rmsnorm(g, &b.x, sel, Some(&h.norm), c.rms_eps, &b.hx)?;
                } else {
                    let copies: Vec<_> = rows
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| (t * d, i * d, d))
                        .collect();
                    g.copy_f32(&b.x, &b.xb, &copies)?;
                    let dense = Rows::dense(m, d);
                    ops::rmsnorm(g, &b.xb, dense, Some(&h.norm), c.rms_eps, &b.hx)?;
                }
                let nl = m * c.n_vocab;
                gpack_gpu::matmul(g, &h.output, &b.hx, m, &b.logits)?;
                if let Some(div) = c.logit_scale {
                    ops::map(g, &b.logits, nl, Map::Divide(div))?;
                }
                if let Some(cap) = c.final_softcap {
                    ops::map(g, &b.logits, nl, Map::Softcap(cap))?;
                }
            }
        }
        // The logits and the residual rows (hidden states, and the CPU
        // blocks' input) back in one submission: the step's only one
        // without MoE layers.
        let nl = if logits { m * c.n_vocab } else { 0 };
        let mut back =
            g.read_many(&[(&b.logits, 0, nl as u64 * 4), (&b.x, 0, (n * d) as u64 * 4)])?;
        let x = back.pop().expect("two ranges read");
        let lg = back.pop().expect("two ranges read");
        let x: Vec<f32> = bytemuck::pod_collect_to_vec(&x);
        s.x[..n * d].copy_from_slice(&x);
        if logits {
            s.logits = bytemuck::pod_collect_to_vec(&lg);
        }
        Ok(logits)
    }

    /// A block's attention half: norm, q‖k‖v, biases, q/k norms, rotary
    /// embeddings, each sequence's cache append and attention, the output
    /// projection into `b.out` (`Model::prepare_qkv` and `Model::attention`).
    #[allow(clippy::too_many_arguments)]
    fn gpu_attention_half(
        &self,
        g: &Gpu,
        blk: &GpuBlock,
        b: &GpuScratch,
        seqs: &[&mut Sequence],
        spans: &[(usize, usize)],
        l: usize,
        n: usize,
    ) -> GResult<()> {
        let c = &self.config;
        let (d, qd, kd, hd) = (c.n_embd, c.q_dim(), c.k_dim(), c.head_dim);
        let qkv_w = qd + kd + c.v_dim();
        let att_w = c.n_head * c.head_dim_v;
        let input = normed(g, c, b, n, blk.attn_norm.as_ref())?;
        blk.qkv.matmul(g, input, n, &b.qkv)?;
        if let Some(bias) = &blk.qkv_bias {
            ops::add_bias(g, &b.qkv, bias, n, qkv_w)?;
        }
        // Per head, or over all heads together: as wide as the weight.
        if let Some((w, width)) = &blk.q_norm {
            let rows = Rows::heads(n, qd / width, *width, 0, qkv_w);
            ops::rmsnorm_inplace(g, &b.qkv, rows, Some(w), c.rms_eps)?;
        }
        if let Some((w, width)) = &blk.k_norm {
            let rows = Rows::heads(n, kd / width, *width, qd, qkv_w);
            ops::rmsnorm_inplace(g, &b.qkv, rows, Some(w), c.rms_eps)?;
        }
        if blk.rope {
            let cs = if blk.swa { &b.cs_swa } else { &b.cs_global };
            let args = RopeArgs {
                n_tok: n,
                n_heads: c.n_head + c.n_head_kv,
                head_dim: hd,
                n_rot: c.n_rot,
                neox: c.rope_style == RopeStyle::Neox,
                off: 0,
                stride: qkv_w,
            };
            ops::rope(g, &b.qkv, cs, args)?;
        }
        let one = seqs.len() == 1;
        for (q, &(row0, len)) in seqs.iter().zip(spans) {
            let kv = q.gpu.as_ref().expect("made at the step's start");
            let layer = &kv.layers[l];
            let base = row0 * qkv_w;
            layer.append(g, &b.qkv, &kv.pos, len, base + qd, base + qd + kd, qkv_w)?;
            let args = AttnArgs {
                n_tok: len,
                n_head: c.n_head,
                q_off: base,
                q_stride: qkv_w,
                scale: c.attn_scale,
                softcap: c.attn_softcap,
                window: if blk.swa { c.sliding_window } else { None },
            };
            let dst = if one { &b.att } else { &b.att1 };
            ops::attention(g, layer, &b.qkv, &kv.pos, args, blk.sinks.as_ref(), dst)?;
            if !one {
                g.copy_f32(&b.att1, &b.att, &[(0, row0 * att_w, len * att_w)])?;
            }
        }
        gpack_gpu::matmul(g, &blk.wo, &b.att, n, &b.out)?;
        if let Some(bias) = &blk.wo_bias {
            ops::add_bias(g, &b.out, bias, n, d)?;
        }
        Ok(())
    }
}
