//! The GPU executor: a model's first blocks (all by default) and its head
//! on a device opened through `gpack-gpu`, run by the model's own step
//! (`step.rs` hands it the residual rows after the embedding lookup and
//! takes back the logits, or the residual rows for the CPU's remaining
//! blocks).
//!
//! * `mod.rs`: choosing the device ([`crate::Device`]), refusing what the
//!   device cannot run, binding the weights ([`GpuModel::attach`]);
//! * `weights.rs`: the matrices uploaded (sections from the mapping, SHA-256
//!   checked on the way);
//! * `step.rs`: the block graph of `model/step.rs` on the device, with the
//!   per-sequence f16 KV caches ([`GpuKv`]) and the step's buffers
//!   ([`GpuScratch`]).
//!
//! The same graph as the CPU's for the dense families (llama, qwen2,
//! qwen3, gemma2, gemma3, phi3, olmo2, granite, smollm3) and the routed
//! experts' (qwen3moe, mixtral, gpt-oss: every expert resident on the
//! device, the router on the host with the CPU's rule, `moe::route_rows`);
//! DeepSeek's latent attention and Gemma 3n's graph stay on the CPU and
//! are refused on `Device::Gpu`.
//!
//! The embedding lookup and the rotary tables are computed on the host (the
//! CPU's `embd.row` and `Rope::cos_sin`, so both devices start from the same
//! bits) and uploaded per step: `n × n_embd` and `n × n_rot` floats.

mod step;
mod weights;

pub(crate) use step::{GpuKv, GpuScratch};

use super::{Ffn, Graph, LoadOptions, Model, MoeFfn};
use crate::config::Config;
use crate::device::{Device, GpuMemory};
use crate::error::{Error, Result};
use crate::experts::DeviceExpert;
use crate::weights::WeightSource;
use gpack_gpu::ops::Buffer;
use gpack_gpu::upload::Report;
use gpack_gpu::{AdapterKind, Allow, Gpu, GpuMatrix, Want};
use std::sync::Arc;
use weights::{GpuProj, ProjTicket, Ticket, Uploader};

/// One block's weights on the device.
#[derive(Debug)]
struct GpuBlock {
    attn_norm: Option<Buffer>,
    qkv: GpuProj,
    qkv_bias: Option<Buffer>,
    /// The q norm's weight and its width (a head, or all heads).
    q_norm: Option<(Buffer, usize)>,
    k_norm: Option<(Buffer, usize)>,
    wo: Arc<GpuMatrix>,
    wo_bias: Option<Buffer>,
    sinks: Option<Buffer>,
    post_attn_norm: Option<Buffer>,
    ffn_norm: Option<Buffer>,
    ffn: GpuFfn,
    post_ffn_norm: Option<Buffer>,
    swa: bool,
    /// Rotary embeddings in this layer (not a NoPE layer: SmolLM3).
    rope: bool,
}

/// A block's feed-forward network on the device.
#[derive(Debug)]
enum GpuFfn {
    /// gate‖up and down.
    Dense {
        gate_up: GpuProj,
        down: Arc<GpuMatrix>,
    },
    /// Routed experts, every one resident (the router runs on the host:
    /// `step.rs`).
    Moe(GpuMoe),
}

/// A MoE layer's experts on the device.
#[derive(Debug)]
struct GpuMoe {
    /// Per expert: gate, up, down.
    experts: Vec<[Arc<GpuMatrix>; 3]>,
    /// Per expert: the gate‖up biases (`[2 · n_ff_exp]`) and the down
    /// bias (`[n_embd]`), when the layer has them (gpt-oss).
    bias: Option<Vec<(Buffer, Buffer)>>,
    /// The shared experts' dense FFN (gate‖up, down).
    shared: Option<(GpuProj, Arc<GpuMatrix>)>,
}

impl GpuFfn {
    /// The widest hidden layer a step's buffers must hold.
    fn width(&self) -> usize {
        match self {
            GpuFfn::Dense { down, .. } => down.cols(),
            GpuFfn::Moe(m) => {
                let e = m.experts.first().map_or(0, |x| x[2].cols());
                let s = m.shared.as_ref().map_or(0, |(_, d)| d.cols());
                e.max(s)
            }
        }
    }
}

/// The final norm and the head on the device.
#[derive(Debug)]
struct GpuHead {
    norm: Buffer,
    output: Arc<GpuMatrix>,
}

/// A model's blocks (the first `blocks.len()`) and, when all of them are
/// on the device, its head.
#[derive(Debug)]
pub(crate) struct GpuModel {
    gpu: Arc<Gpu>,
    blocks: Vec<GpuBlock>,
    head: Option<GpuHead>,
    reports: Vec<Report>,
    /// Device memory the weights take (section buffers and own uploads).
    weight_bytes: u64,
    /// f16 KV bytes per position of one sequence (every GPU block).
    kv_bytes_per_pos: u64,
    /// Steps run (for [`LoadOptions::gpu_lost_at_step`]).
    steps: std::sync::atomic::AtomicU64,
    lost_at: Option<u64>,
    /// Queue submissions of the last step.
    last_submits: std::sync::atomic::AtomicU64,
    /// The budget planned against (bytes, where from), if known.
    budget: Option<(u64, String)>,
    /// What the plan counted for the blocks placed.
    planned: Need,
    /// The model's blocks.
    blocks_total: usize,
}

/// Device memory a placement needs, counted before anything is allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Need {
    /// Weight buffers: the sections' placements, own uploads, norms and
    /// biases.
    weights: u64,
    /// The f16 KV caches of the GPU blocks.
    kv: u64,
    /// The step's buffers ([`GpuScratch`]) at the planned rows.
    scratch: u64,
    /// Positions and sequences the KV caches were counted for.
    positions: usize,
    sequences: usize,
}

impl Need {
    fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }

    fn detail(&self) -> String {
        use crate::device::bytes;
        format!(
            "weights {}, f16 KV cache {} ({} positions × {} sequence{}), step buffers {}",
            bytes(self.weights),
            bytes(self.kv),
            self.positions,
            self.sequences,
            if self.sequences == 1 { "" } else { "s" },
            bytes(self.scratch)
        )
    }
}

/// Rows of a step the memory plan counts buffers for (a prompt of more
/// grows them at its step, inside the allocation's error scope).
const PLAN_ROWS: usize = 512;

/// The positions a KV cache is planned for when the caller gives no
/// context.
const PLAN_CONTEXT: usize = 4096;

/// Why the device cannot run the model's graph, if it cannot.
fn refusal(m: &Model) -> Option<(String, &'static str)> {
    let c = &m.config;
    let fam = c.arch.name();
    if c.gemma3n.is_some() || matches!(m.graph, Graph::Gemma3n(_)) {
        return Some((
            format!("family {fam}"),
            "Gemma 3n's graph has no GPU executor yet",
        ));
    }
    if c.mla.is_some() {
        return Some((
            format!("family {fam}"),
            "DeepSeek's latent attention has no GPU executor yet",
        ));
    }
    if m.kv != super::KvTypes::F16 {
        return Some((
            format!("a {} KV cache", m.kv),
            "the GPU keeps its KV cache as f16 (--kv f16)",
        ));
    }
    let bad_head = |d: usize| d == 0 || d % 2 == 1 || d > 512;
    if bad_head(c.head_dim) || bad_head(c.head_dim_v) {
        return Some((
            format!("head dims {}/{}", c.head_dim, c.head_dim_v),
            "the GPU attention takes even head dims up to 512",
        ));
    }
    None
}

/// `e` and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

fn upload_vec(g: &Gpu, name: &str, v: &[f32]) -> Result<Buffer> {
    g.upload(name, bytemuck::cast_slice(v))
        .map_err(|source| Error::Gpu {
            what: format!("uploading {name}"),
            source,
        })
}

/// A block's FFN matrices asked of the [`Uploader`].
enum FfnTicket {
    Dense(ProjTicket, Ticket),
    Moe(Vec<[Ticket; 3]>, Option<(ProjTicket, Ticket)>),
}

/// Layer `l`'s per-expert biases on the device (gate‖up, down), if it has
/// any (gpt-oss has all three; an absent one is zeros).
fn expert_biases(
    g: &Gpu,
    c: &Config,
    l: usize,
    f: &MoeFfn<'_>,
) -> Result<Option<Vec<(Buffer, Buffer)>>> {
    if f.bias.iter().all(Option::is_none) {
        return Ok(None);
    }
    let (d, ff) = (c.n_embd, c.n_ff_exp);
    let part = |i: usize, e: usize, len: usize| -> Vec<f32> {
        f.bias[i]
            .as_ref()
            .map_or_else(|| vec![0.0; len], |b| b[e * len..(e + 1) * len].to_vec())
    };
    (0..c.n_expert)
        .map(|e| {
            let mut gu = part(0, e, ff);
            gu.extend(part(1, e, ff));
            Ok((
                upload_vec(g, &format!("blk.{l}.exp{e}.gate_up_bias"), &gu)?,
                upload_vec(g, &format!("blk.{l}.exp{e}.down_bias"), &part(2, e, d))?,
            ))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// What the device is asked to hold for every block and the head, with
/// marks: `marks[l]` matrices are asked for by blocks `0..=l`.
struct Asked<'a> {
    up: Uploader<'a>,
    tickets: Vec<(ProjTicket, Ticket, FfnTicket)>,
    marks: Vec<usize>,
    head: Ticket,
}

/// Bytes of a block's small vectors (norms, biases, sinks, expert biases)
/// on the device.
fn small_bytes(m: &Model<'_>, l: usize) -> u64 {
    let layer = &m.layers[l];
    let c = &m.config;
    let v = |x: &Option<Vec<f32>>| x.as_ref().map_or(0, |v| (v.len().max(1) * 4) as u64);
    let mut b = [
        &layer.attn_norm,
        &layer.qkv_bias,
        &layer.q_norm,
        &layer.k_norm,
        &layer.wo_bias,
        &layer.sinks,
        &layer.post_attn_norm,
        &layer.ffn_norm,
        &layer.post_ffn_norm,
    ]
    .iter()
    .map(|x| v(x))
    .sum::<u64>();
    if let Ffn::Moe(f) = &layer.ffn {
        if f.bias.iter().any(Option::is_some) {
            b += (c.n_expert * (2 * c.n_ff_exp + c.n_embd) * 4) as u64;
        }
    }
    b
}

impl GpuModel {
    /// The device part of `m` as `opts` asks (`None`: all on the CPU).
    /// [`Device::Auto`] falls back to the CPU, logging why, where
    /// [`Device::Gpu`] fails.
    pub(super) fn attach(
        m: &Model<'_>,
        w: &dyn WeightSource,
        opts: &LoadOptions,
    ) -> Result<Option<GpuModel>> {
        let auto = match opts.device {
            Device::Cpu => return Ok(None),
            Device::Auto => true,
            Device::Gpu(_) => false,
        };
        if opts.gpu_layers == Some(0) {
            log::info!("device: --gpu-layers 0, every block on the CPU");
            return Ok(None);
        }
        if let Some((what, why)) = refusal(m) {
            if auto {
                log::info!("device auto: the CPU ({what} runs on the CPU only for now: {why})");
                return Ok(None);
            }
            return Err(Error::DeviceUnsupported { what, why });
        }
        let want = match opts.device {
            Device::Gpu(Some(i)) => Want::Index(i),
            Device::Gpu(None) => Want::Any,
            _ => Want::Auto,
        };
        let allow = Allow {
            max_binding: opts.gpu_max_binding,
            ..Allow::default()
        };
        let gpu = match Gpu::open_with(want, allow) {
            Ok(g) => g,
            Err(e) if auto => {
                log::info!("device auto: the CPU ({e})");
                return Ok(None);
            }
            Err(source) => {
                return Err(Error::Gpu {
                    what: format!("opening --device {}", opts.device),
                    source,
                })
            }
        };
        let caps = gpu.caps().clone();
        if caps.kind == AdapterKind::Software && !auto {
            log::warn!(
                "device gpu: {} is a software adapter (the CPU behind a GPU API): correct, not fast",
                caps.name
            );
        }
        let budget = match opts.gpu_memory {
            GpuMemory::Unknown => None,
            GpuMemory::Bytes(b) => Some((b, "--gpu-memory".to_string())),
            GpuMemory::Auto => match gpu.memory_hint() {
                Some((b, from)) => Some((b, format!("--gpu-memory auto: {from}"))),
                None => {
                    log::info!(
                        "--gpu-memory auto: {} does not say its memory size here (wgpu has no \
                         query); no plan against a budget (give --gpu-memory BYTES)",
                        caps.name
                    );
                    None
                }
            },
        };
        match GpuModel::build(Arc::new(gpu), m, w, opts, auto, budget) {
            Ok(g) => {
                log::info!("device {}: {}", opts.device, g.summary());
                Ok(Some(g))
            }
            Err(e) if auto => {
                log::warn!(
                    "device auto: the CPU (the model does not run on {} ({}): {})",
                    caps.name,
                    caps.backend,
                    chain(&e)
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Asks the uploader for every block's matrices and the head's.
    fn ask<'a>(m: &Model<'a>, w: &'a dyn WeightSource) -> Result<Asked<'a>> {
        let c = &m.config;
        let mut up = Uploader::new(w.device_sections());
        let mut tickets = Vec::with_capacity(c.n_layer);
        let mut marks = Vec::with_capacity(c.n_layer);
        for (l, layer) in m.layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{l}.{s}");
            let ffn = match &layer.ffn {
                Ffn::Dense { gate_up, down } => FfnTicket::Dense(
                    up.proj(&n("ffn_gate_up"), gate_up)?,
                    up.matrix(&n("ffn_down.weight"), down)?,
                ),
                Ffn::Moe(f) => {
                    let store = m.experts.as_ref().ok_or_else(|| Error::Gpu {
                        what: format!("layer {l}"),
                        source: gpack_gpu::Error::Device(
                            "a MoE layer without its expert store".into(),
                        ),
                    })?;
                    let mut experts = Vec::with_capacity(c.n_expert);
                    for e in 0..c.n_expert {
                        let ex = store.for_device(l, e)?;
                        let mats = match &ex {
                            DeviceExpert::Mapped(x) => &x.mats,
                            DeviceExpert::Owned(x) => &x.mats,
                        };
                        let mut t = [Ticket::NONE; 3];
                        for (p, part) in crate::experts::PARTS.iter().enumerate() {
                            t[p] = up.matrix(&n(&format!("ffn_{part}_exps[{e}]")), &mats[p])?;
                        }
                        experts.push(t);
                    }
                    let shared = match &f.shared {
                        Some((gu, down)) => Some((
                            up.proj(&n("ffn_gate_up_shexp"), gu)?,
                            up.matrix(&n("ffn_down_shexp.weight"), down)?,
                        )),
                        None => None,
                    };
                    FfnTicket::Moe(experts, shared)
                }
            };
            tickets.push((
                up.proj(&n("attn_qkv"), &layer.qkv)?,
                up.matrix(&n("attn_output.weight"), &layer.wo)?,
                ffn,
            ));
            marks.push(up.len());
        }
        let head = up.matrix("output.weight", &m.output)?;
        Ok(Asked {
            up,
            tickets,
            marks,
            head,
        })
    }

    /// What `k ≥ 1` blocks (and the head when `k` is all of them) need on
    /// the device: weights as placed, f16 KV caches at the planned context
    /// for the planned sequences, a step's buffers at [`PLAN_ROWS`] rows.
    fn need(g: &Gpu, m: &Model<'_>, a: &Asked<'_>, k: usize, opts: &LoadOptions) -> Result<Need> {
        let c = &m.config;
        let all = k == c.n_layer;
        let n_mats = if all { a.up.len() } else { a.marks[k - 1] };
        let mut weights = a.up.device_bytes(g, n_mats)?;
        weights += (0..k).map(|l| small_bytes(m, l)).sum::<u64>();
        if all {
            weights += (c.n_embd * 4) as u64;
        }
        let positions = match opts.context {
            0 => c.n_ctx_train.clamp(1, PLAN_CONTEXT),
            n => n,
        };
        let sequences = opts.sequences.max(1);
        let kv = (k * c.n_head_kv * (c.head_dim + c.head_dim_v) * 2) as u64
            * positions as u64
            * sequences as u64;
        let rows = positions.min(PLAN_ROWS);
        let head_rows = if all { sequences } else { 0 };
        let ff = (0..k)
            .map(|l| match &m.layers[l].ffn {
                Ffn::Dense { down, .. } => down.cols(),
                Ffn::Moe(f) => c
                    .n_ff_exp
                    .max(f.shared.as_ref().map_or(0, |(_, d)| d.cols())),
            })
            .max()
            .unwrap_or(0);
        let moe = (0..k).any(|l| matches!(m.layers[l].ffn, Ffn::Moe(_)));
        let scratch = GpuScratch::floats(c, ff, moe, rows, head_rows)
            .iter()
            .map(|&f| (f.max(1) * 4) as u64)
            .sum();
        Ok(Need {
            weights,
            kv,
            scratch,
            positions,
            sequences,
        })
    }

    /// Plans and uploads the blocks `opts` and the budget allow (and the
    /// head, when that is all of them).
    fn build(
        gpu: Arc<Gpu>,
        m: &Model<'_>,
        w: &dyn WeightSource,
        opts: &LoadOptions,
        auto: bool,
        budget: Option<(u64, String)>,
    ) -> Result<GpuModel> {
        let g = &*gpu;
        let c = &m.config;
        let n_layer = c.n_layer;
        let mut asked = GpuModel::ask(m, w)?;
        let asked_blocks = opts.gpu_layers.map(|k| k.min(n_layer));
        let mut n_blocks = asked_blocks.unwrap_or(n_layer);
        let planned = GpuModel::need(g, m, &asked, n_blocks, opts)?;
        let mut plan = planned;
        if let Some((b, from)) = &budget {
            let over = |what: String, need: Need, hint| Error::GpuMemory {
                what,
                needed: need.total(),
                detail: need.detail(),
                budget: *b,
                from: from.clone(),
                hint,
            };
            if planned.total() > *b {
                if let Some(k) = asked_blocks {
                    return Err(over(
                        format!("--gpu-layers {k}"),
                        planned,
                        "ask for fewer blocks, or leave --gpu-layers out to place as many as fit",
                    ));
                }
                if auto {
                    return Err(over(
                        format!("all {n_layer} blocks"),
                        planned,
                        "--device auto prefers the CPU unless every block fits \
                         (--device gpu places as many as fit)",
                    ));
                }
                let mut k = n_layer - 1;
                while k > 0 {
                    plan = GpuModel::need(g, m, &asked, k, opts)?;
                    if plan.total() <= *b {
                        break;
                    }
                    k -= 1;
                }
                if k == 0 {
                    let one = GpuModel::need(g, m, &asked, 1, opts)?;
                    return Err(over(
                        "not even one block fits: block 0".to_string(),
                        one,
                        "run on the CPU (--device cpu), or give a larger --gpu-memory or a \
                         smaller --ctx",
                    ));
                }
                log::warn!(
                    "device {}: {k} of {n_layer} blocks fit in {} of GPU memory ({from}; \
                     all would need {}: {}); the rest and the head run on the CPU",
                    opts.device,
                    crate::device::bytes(*b),
                    crate::device::bytes(planned.total()),
                    planned.detail()
                );
                n_blocks = k;
            }
        }
        if n_blocks < n_layer {
            asked.up.truncate(asked.marks[n_blocks - 1]);
            asked.tickets.truncate(n_blocks);
        }
        let all = n_blocks == n_layer;
        let Asked {
            up, tickets, head, ..
        } = asked;
        let (mats, reports, weight_bytes) = up.upload(g)?;
        let head = all.then_some(head);
        let opt = |name: String, v: &Option<Vec<f32>>| -> Result<Option<Buffer>> {
            v.as_deref().map(|v| upload_vec(g, &name, v)).transpose()
        };
        let mut blocks = Vec::with_capacity(n_blocks);
        for (l, (layer, (qkv, wo, ffn))) in m.layers.iter().zip(tickets).enumerate() {
            let n = |s: &str| format!("blk.{l}.{s}");
            let width = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, Vec::len);
            blocks.push(GpuBlock {
                attn_norm: opt(n("attn_norm"), &layer.attn_norm)?,
                qkv: mats.proj(&qkv),
                qkv_bias: opt(n("attn_qkv.bias"), &layer.qkv_bias)?,
                q_norm: opt(n("attn_q_norm"), &layer.q_norm)?.map(|b| (b, width(&layer.q_norm))),
                k_norm: opt(n("attn_k_norm"), &layer.k_norm)?.map(|b| (b, width(&layer.k_norm))),
                wo: mats.get(wo),
                wo_bias: opt(n("attn_output.bias"), &layer.wo_bias)?,
                sinks: opt(n("attn_sinks"), &layer.sinks)?,
                post_attn_norm: opt(n("post_attention_norm"), &layer.post_attn_norm)?,
                ffn_norm: opt(n("ffn_norm"), &layer.ffn_norm)?,
                ffn: match ffn {
                    FfnTicket::Dense(gu, down) => GpuFfn::Dense {
                        gate_up: mats.proj(&gu),
                        down: mats.get(down),
                    },
                    FfnTicket::Moe(experts, shared) => {
                        let Ffn::Moe(f) = &layer.ffn else {
                            unreachable!("tickets follow the layer's FFN")
                        };
                        GpuFfn::Moe(GpuMoe {
                            experts: experts.iter().map(|t| t.map(|k| mats.get(k))).collect(),
                            bias: expert_biases(g, c, l, f)?,
                            shared: shared.map(|(gu, d)| (mats.proj(&gu), mats.get(d))),
                        })
                    }
                },
                post_ffn_norm: opt(n("post_ffw_norm"), &layer.post_ffn_norm)?,
                swa: layer.swa,
                rope: c.rope_layers[l],
            });
        }
        let head = match head {
            Some(t) => Some(GpuHead {
                norm: upload_vec(g, "output_norm", &m.output_norm)?,
                output: mats.get(t),
            }),
            None => None,
        };
        g.wait().map_err(|source| Error::Gpu {
            what: "uploading the weights".into(),
            source,
        })?;
        Ok(GpuModel {
            gpu,
            blocks,
            head,
            reports,
            weight_bytes,
            kv_bytes_per_pos: (n_blocks * c.n_head_kv * (c.head_dim + c.head_dim_v) * 2) as u64,
            steps: Default::default(),
            lost_at: opts.gpu_lost_at_step,
            last_submits: Default::default(),
            budget,
            planned: plan,
            blocks_total: n_layer,
        })
    }

    /// How many matrices are bound as several row pieces (larger than one
    /// binding).
    fn cut_tensors(&self) -> usize {
        let mut mats: Vec<&GpuMatrix> = Vec::new();
        for b in &self.blocks {
            mats.extend(b.qkv.members());
            mats.push(&b.wo);
            match &b.ffn {
                GpuFfn::Dense { gate_up, down } => {
                    mats.extend(gate_up.members());
                    mats.push(down);
                }
                GpuFfn::Moe(m) => {
                    mats.extend(m.experts.iter().flat_map(|e| e.iter().map(|x| &**x)));
                    if let Some((gu, d)) = &m.shared {
                        mats.extend(gu.members());
                        mats.push(d);
                    }
                }
            }
        }
        if let Some(h) = &self.head {
            mats.push(&h.output);
        }
        mats.iter().filter(|m| m.pieces() > 1).count()
    }

    /// The adapter and what the model holds on it.
    pub(super) fn info(&self) -> crate::device::GpuInfo {
        let c = self.gpu.caps();
        crate::device::GpuInfo {
            adapter: c.name.clone(),
            backend: c.backend,
            software: c.kind == AdapterKind::Software,
            blocks: self.blocks.len(),
            head: self.head.is_some(),
            weight_bytes: self.weight_bytes,
            kv_bytes_per_position: self.kv_bytes_per_pos,
            blocks_total: self.blocks_total,
            memory_budget: self.budget.as_ref().map(|b| b.0),
            memory_planned: self.planned.total(),
            steps: self.steps.load(std::sync::atomic::Ordering::Relaxed),
            last_step_submissions: self.last_submits.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Records the submissions of a step that started at `before`.
    fn step_done(&self, before: u64) {
        let n = self.gpu.submissions().saturating_sub(before);
        self.last_submits
            .store(n, std::sync::atomic::Ordering::Relaxed);
        log::trace!("GPU step: {n} queue submission(s)");
    }

    /// Why the device was lost, if it was.
    pub(super) fn lost(&self) -> Option<String> {
        self.gpu.lost()
    }

    /// Counts a step; destroys the device at the injected step.
    fn count_step(&self) {
        let n = self
            .steps
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if self.lost_at == Some(n) {
            log::warn!("GPACK_TEST_GPU_LOST_AT_STEP={n}: destroying the GPU device");
            self.gpu.destroy();
        }
    }

    /// Blocks on the device.
    pub(super) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The adapter, its backend, the blocks on it and the uploads.
    pub(super) fn summary(&self) -> String {
        let c = self.gpu.caps();
        let kind = match c.kind {
            AdapterKind::Hardware => "hardware",
            AdapterKind::Software => "software",
        };
        let mut s =
            format!(
            "{} ({}, {kind}, f16 {}, subgroups {}, binding limit {} MiB); {} blocks{} on the GPU",
            c.name,
            c.backend,
            c.f16,
            c.subgroups,
            c.max_binding >> 20,
            self.blocks.len(),
            if self.head.is_some() { " and the head" } else { "" },
        );
        s.push_str(&format!(
            "; device memory: weights {:.1} MiB, KV {} B per position per sequence",
            self.weight_bytes as f64 / (1 << 20) as f64,
            self.kv_bytes_per_pos
        ));
        s.push_str(&format!(
            "; planned {} ({}) against {}",
            crate::device::bytes(self.planned.total()),
            self.planned.detail(),
            match &self.budget {
                Some((b, from)) => format!("a budget of {} ({from})", crate::device::bytes(*b)),
                None => "no known budget (--gpu-memory)".to_string(),
            }
        ));
        if self.blocks.len() < self.blocks_total {
            s.push_str(&format!(
                "; {} of {} blocks on the GPU, the rest and the head on the CPU",
                self.blocks.len(),
                self.blocks_total
            ));
        }
        let cut = self.cut_tensors();
        if cut > 0 {
            s.push_str(&format!("; {cut} tensors bound as row pieces"));
        }
        for r in &self.reports {
            s.push_str(&format!("; {r}"));
        }
        s
    }
}
