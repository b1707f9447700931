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
use crate::device::Device;
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
}

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
        let blocks = opts
            .gpu_layers
            .unwrap_or(m.config.n_layer)
            .min(m.config.n_layer);
        if blocks == 0 {
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
        match GpuModel::build(Arc::new(gpu), m, w, blocks, opts.gpu_lost_at_step) {
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

    /// Uploads the first `n_blocks` blocks (and the head, when that is all).
    fn build(
        gpu: Arc<Gpu>,
        m: &Model<'_>,
        w: &dyn WeightSource,
        n_blocks: usize,
        lost_at: Option<u64>,
    ) -> Result<GpuModel> {
        let g = &*gpu;
        let c = &m.config;
        let all = n_blocks == c.n_layer;
        let mut up = Uploader::new(w.device_sections());
        let mut tickets = Vec::with_capacity(n_blocks);
        for (l, layer) in m.layers.iter().take(n_blocks).enumerate() {
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
        }
        let head = match all {
            true => Some(up.matrix("output.weight", &m.output)?),
            false => None,
        };
        let (mats, reports, weight_bytes) = up.upload(g)?;
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
            lost_at,
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
        }
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
