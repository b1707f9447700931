//! The plan: every source tensor gets a section, a layout, an offset and a size
//! before anything is written.

use crate::policy::{self, Container, Decision, Member, Quant};
use crate::{Error, QuantizeProblem, TensorProblem};
use gpack_format::payload::LAYOUT_GGML;
use gpack_format::SectionKind;
use gpack_ingest::{GgmlType, Source, TensorInfo, MAX_LAYERS};
use gpack_quant::{native_layout_for, Layout, NativeTensorHeader};

/// Where a tensor goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// `token_embd.weight` → Embed.
    Embed,
    /// `output.weight` → Head.
    Head,
    /// Per-layer embedding table → Ple.
    Ple,
    /// Vectors and other small tensors, raw → DensePack.
    Dense,
    /// Matmul weights, native layout → NativeDense arena.
    Native,
    /// Stacked routed experts → ExpertBlobs (or external references).
    Experts,
}

impl Placement {
    /// The section that holds this placement's bytes.
    pub fn section(self, external_experts: bool) -> SectionKind {
        match self {
            Placement::Embed => SectionKind::Embed,
            Placement::Head => SectionKind::Head,
            Placement::Ple => SectionKind::Ple,
            Placement::Dense => SectionKind::DensePack,
            Placement::Native => SectionKind::NativeDense,
            Placement::Experts if external_experts => SectionKind::ExpertLayout,
            Placement::Experts => SectionKind::ExpertBlobs,
        }
    }
}

/// One tensor of the plan.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    /// Index into `Source::tensors`.
    pub source: usize,
    /// Where it goes.
    pub placement: Placement,
    /// Target native layout (`None`: raw bytes of the source type: Dense,
    /// Ple, external experts).
    pub layout: Option<Layout>,
    /// Whether `layout` is quantized from the source's values rather than an
    /// exact transcode ([`policy::decide`]).
    pub quantized: bool,
    /// Rows as the native layout sees them (product of dims after the first;
    /// for experts, one expert's rows).
    pub rows: u64,
    /// Columns (ne0).
    pub cols: u64,
    /// Offset within its section (Dense, Native) or of its payload after the
    /// 64-byte single-tensor header (Embed, Head, Ple: always 64).
    pub offset: u64,
    /// Encoded bytes (for experts: one expert's slice; for a fused group's
    /// members: the whole fused tensor).
    pub size: u64,
    /// Fused-group role (q‖k‖v or gate‖up stored as one native tensor).
    pub fuse: Fuse,
}

/// A tensor's role in a fused group.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Fuse {
    /// Stored alone.
    #[default]
    None,
    /// Carries the fused tensor: the plan indices of all members, in row
    /// order (itself first); its `rows` and `size` are the fused tensor's.
    Carrier(Vec<usize>),
    /// Rows `row_start..row_start + own rows` of the carrier's tensor.
    Member {
        /// Plan index of the carrier.
        carrier: usize,
        /// First row inside the fused tensor.
        row_start: u64,
    },
}

/// Members of the groups fused into one native tensor per layer, in row order.
pub use gpack_ingest::FUSED_GROUPS;

impl PlannedTensor {
    /// The layout code recorded in the tensor index.
    pub fn layout_code(&self) -> u32 {
        self.layout.map_or(LAYOUT_GGML, |l| l.code())
    }

    /// The policy's decision for this tensor (`None`: stored raw).
    pub fn decision(&self) -> Option<Decision> {
        self.layout.map(|layout| Decision {
            layout,
            quantized: self.quantized,
        })
    }
}

/// The routed-expert part of a plan.
#[derive(Clone, Debug, Default)]
pub struct ExpertPlan {
    /// Layers (block_count).
    pub n_layers: u32,
    /// Experts per layer.
    pub n_expert: u32,
    /// `[layer][part]` → index into `Plan::tensors` (part 0 gate, 1 up, 2 down).
    pub parts: Vec<[Option<usize>; 3]>,
    /// Offsets in ExpertBlobs, `[(layer × n_expert + e) × 3 + part]`.
    pub blob_offsets: Vec<u64>,
    /// Size of ExpertBlobs.
    pub blob_size: u64,
}

/// The whole plan.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Every tensor, in source order.
    pub tensors: Vec<PlannedTensor>,
    /// Size of DensePack.
    pub dense_size: u64,
    /// Size of the NativeDense arena.
    pub native_size: u64,
    /// Routed experts.
    pub experts: ExpertPlan,
}

/// Alignment of each tensor in the NativeDense arena and ExpertBlobs.
pub const NATIVE_ALIGN: u64 = 256;
/// Alignment of each tensor in DensePack.
pub const DENSE_ALIGN: u64 = 64;

/// Whether a tensor of `src` type stored in `layout` also carries the f16
/// copy of its scales (and mins): when the layout is the exact transcode of a
/// type whose scales are f16 in the blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), the
/// kernels then stream as many bytes per weight as the GGUF does.
pub fn with_f16_scales(src: GgmlType, layout: Layout) -> bool {
    layout == native_layout_for(src) && gpack_quant::transcode::f16_scales_exact_for(src)
}

/// Encoded bytes of a native tensor of `rows × cols` from `src` in `layout`.
pub fn native_len(
    src: GgmlType,
    layout: Layout,
    rows: u64,
    cols: u64,
) -> Result<u64, gpack_quant::Error> {
    Ok(NativeTensorHeader::new(layout, rows, cols, with_f16_scales(src, layout))?.1)
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn tensor_err(t: &TensorInfo, problem: TensorProblem) -> Error {
    Error::Tensor {
        tensor: t.name.clone(),
        problem,
    }
}

/// `blk.N.ffn_{gate,up,down}_exps.weight` → `(N, part)`.
fn expert_part(name: &str) -> Option<(u32, usize)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let part = match rest {
        "ffn_gate_exps.weight" => 0,
        "ffn_up_exps.weight" => 1,
        "ffn_down_exps.weight" => 2,
        _ => return None,
    };
    Some((layer.parse().ok()?, part))
}

fn classify(t: &TensorInfo) -> Placement {
    match t.name.as_str() {
        "token_embd.weight" => return Placement::Embed,
        "output.weight" => return Placement::Head,
        "per_layer_token_embd.weight" => return Placement::Ple,
        _ => {}
    }
    if expert_part(&t.name).is_some() && t.dims.len() == 3 {
        return Placement::Experts;
    }
    // DeepSeek's per-head MLA matrices (`[cols, rows, n_head]`): stored as
    // one native matrix of `rows · n_head` rows, each head a whole row range
    // of it (else they would be raw ggml rows, transcoded at every load).
    if t.dims.len() == 3
        && (t.name.ends_with(".attn_k_b.weight") || t.name.ends_with(".attn_v_b.weight"))
    {
        return Placement::Native;
    }
    if t.dims.len() == 2 && t.dims[1] > 1 && t.dims[0] > 1 {
        Placement::Native
    } else {
        Placement::Dense
    }
}

/// Every tensor's decision (`None` for tensors stored raw is decided by
/// the caller; this gives one per source tensor): `quant`'s rules, and for
/// llama-quantize's types the mix of the whole model, with the
/// requantization check.
fn decisions(
    source: &Source,
    quant: Quant,
    allow_requantize: bool,
    has_imatrix: bool,
) -> Result<Vec<Decision>, Error> {
    let cols_of = |t: &TensorInfo| t.dims.first().copied().unwrap_or(1);
    let Quant::Mix(ftype) = quant else {
        return Ok(source
            .tensors
            .iter()
            .map(|t| policy::decide(Container::Gpack, quant, &t.name, t.ggml_type, cols_of(t)))
            .collect());
    };
    let q = |t: &TensorInfo, problem| Error::Quantize {
        tensor: t.name.clone(),
        problem,
    };
    let tensors: Vec<crate::mix::MixTensor<'_>> = source
        .tensors
        .iter()
        .map(|t| crate::mix::MixTensor {
            name: &t.name,
            dims: &t.dims,
            ty: t.ggml_type,
        })
        .collect();
    let facts = crate::mix::Facts {
        has_imatrix,
        ..crate::mix::Facts::of(source)
    };
    let types = crate::mix::mix_types(ftype, &facts, &tensors).map_err(|e| Error::Quantize {
        tensor: String::new(),
        problem: QuantizeProblem::Rules(e),
    })?;
    let mut out = Vec::with_capacity(types.len());
    for (t, &target) in source.tensors.iter().zip(&types) {
        let d = policy::decide_mix(t.ggml_type, target, cols_of(t))
            .ok_or_else(|| q(t, QuantizeProblem::Target { to: target.name() }))?;
        let floaty = matches!(t.ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        if d.quantized && !floaty && !allow_requantize {
            return Err(q(
                t,
                QuantizeProblem::Requantize {
                    from: t.ggml_type.name(),
                    to: target.name(),
                },
            ));
        }
        out.push(d);
    }
    Ok(out)
}

/// Whether `t` must be refused because gpack cannot decode its ggml type:
/// [`plan`] and `prequant` refuse it by name before anything is written
/// (instead of storing it raw and failing when the model runs), as every
/// block-quantized tensor of a model is read by something that decodes it
/// (kernels, embedding lookup, norms, re-quantization). Plain integer/F64
/// tensors (no blocks) stay allowed as `dense` side tensors, which the
/// runtime reads only if a graph asks for them (and then refuses with the
/// tensor named).
pub(crate) fn undecodable(t: &TensorInfo, dense: bool) -> bool {
    let (block, _) = t.ggml_type.block();
    !(gpack_quant::ggml::can_dequantize(t.ggml_type) || (block == 1 && dense))
}

/// Plans `source`. `allow_requantize`: with llama-quantize's types, an
/// already-quantized source tensor may be quantized again (else an error).
/// `has_imatrix`: an importance matrix will be given to the quantizers
/// (llama-quantize's mixes differ for a few tensors then).
pub fn plan(
    source: &Source,
    quant: Quant,
    external_experts: bool,
    allow_requantize: bool,
    has_imatrix: bool,
) -> Result<Plan, Error> {
    let mut p = Plan::default();
    let decided = decisions(source, quant, allow_requantize, has_imatrix)?;
    let n_layers = source
        .architecture()
        .and_then(|a| source.metadata.get_u32(&format!("{a}.block_count")))
        .unwrap_or(0);
    let mut expert_tensors: Vec<(u32, usize, usize)> = Vec::new();
    for (i, t) in source.tensors.iter().enumerate() {
        let placement = classify(t);
        if undecodable(t, placement == Placement::Dense) {
            return Err(Error::UnsupportedType {
                tensor: t.name.clone(),
                ty: t.ggml_type.name(),
            });
        }
        let cols = t.dims.first().copied().unwrap_or(1);
        let all_rows = t.dims.iter().skip(1).product::<u64>();
        let (decision, rows, size) = match placement {
            // The PLE table is read a row at a time (direct I/O, row cache):
            // it stays in its row-contiguous ggml blocks.
            Placement::Dense | Placement::Ple => (None, all_rows, t.size),
            Placement::Experts => {
                let rows = t.dims[1];
                let d = decided[i];
                let layout = d.layout;
                let size = if external_experts {
                    t.ggml_type.bytes_for(rows * cols).ok_or_else(|| {
                        tensor_err(
                            t,
                            TensorProblem::ExpertSliceNotWholeBlocks {
                                elements: rows * cols,
                                ty: t.ggml_type.name(),
                            },
                        )
                    })?
                } else {
                    native_len(t.ggml_type, layout, rows, cols).map_err(|e| Error::Quant {
                        tensor: t.name.clone(),
                        source: e,
                    })?
                };
                let (layer, part) = expert_part(&t.name).unwrap_or((0, 0));
                expert_tensors.push((layer, part, i));
                (Some(d).filter(|_| !external_experts), rows, size)
            }
            _ => {
                let d = decided[i];
                let size = native_len(t.ggml_type, d.layout, all_rows, cols).map_err(|e| {
                    Error::Quant {
                        tensor: t.name.clone(),
                        source: e,
                    }
                })?;
                (Some(d), all_rows, size)
            }
        };
        let offset = match placement {
            Placement::Dense => {
                let o = align(p.dense_size, DENSE_ALIGN);
                p.dense_size = o + size;
                o
            }
            Placement::Native => {
                let o = align(p.native_size, NATIVE_ALIGN);
                p.native_size = o + size;
                o
            }
            Placement::Embed | Placement::Head | Placement::Ple => 64,
            Placement::Experts => 0,
        };
        p.tensors.push(PlannedTensor {
            source: i,
            placement,
            layout: decision.map(|d| d.layout),
            quantized: decision.is_some_and(|d| d.quantized),
            rows,
            cols,
            offset,
            size,
            fuse: Fuse::None,
        });
    }
    fuse_groups(source, &mut p)?;
    if !expert_tensors.is_empty() {
        let n_expert = source.tensors[expert_tensors[0].2].dims[2];
        let n_expert = u32::try_from(n_expert).map_err(|_| {
            tensor_err(
                &source.tensors[expert_tensors[0].2],
                TensorProblem::TooManyExperts { count: n_expert },
            )
        })?;
        // Layer numbers come from tensor names and block_count from the
        // metadata: both bounded before they size the table.
        if let Some(&(layer, _, i)) = expert_tensors.iter().find(|e| e.0 >= MAX_LAYERS) {
            return Err(tensor_err(
                &source.tensors[i],
                TensorProblem::LayerBeyondMax {
                    layer,
                    max: MAX_LAYERS,
                },
            ));
        }
        if n_layers > MAX_LAYERS {
            return Err(Error::LayerCount {
                key: format!("{}.block_count", source.architecture().unwrap_or("")),
                n_layers,
                max: MAX_LAYERS,
            });
        }
        let max_layer = expert_tensors.iter().map(|e| e.0).max().unwrap_or(0);
        let n_layers = n_layers.max(max_layer + 1);
        let mut parts = vec![[None; 3]; n_layers as usize];
        for &(layer, part, i) in &expert_tensors {
            let t = &source.tensors[i];
            if t.dims[2] != u64::from(n_expert) {
                return Err(tensor_err(
                    t,
                    TensorProblem::ExpertCountMismatch {
                        found: t.dims[2],
                        others: n_expert,
                    },
                ));
            }
            if let Some(other) = parts[layer as usize][part].replace(i) {
                return Err(tensor_err(
                    t,
                    TensorProblem::DuplicateExpertTensor {
                        layer,
                        part: ["gate", "up", "down"][part],
                        other: source.tensors[other].name.clone(),
                    },
                ));
            }
        }
        let mut blob_offsets = Vec::new();
        let mut pos = 0u64;
        for layer_parts in &parts {
            for _e in 0..n_expert {
                for part in layer_parts {
                    match part {
                        Some(i) if !external_experts => {
                            pos = align(pos, NATIVE_ALIGN);
                            blob_offsets.push(pos);
                            pos += p.tensors[*i].size;
                        }
                        _ => blob_offsets.push(0),
                    }
                }
            }
        }
        p.experts = ExpertPlan {
            n_layers,
            n_expert,
            parts,
            blob_offsets,
            blob_size: if external_experts { 0 } else { pos },
        };
    }
    Ok(p)
}

/// Fuses q‖k‖v and gate‖up of each layer into one native tensor where
/// [`policy::fuses`] says so (one matrix-vector call then covers all of
/// them), and lays the NativeDense arena out again.
fn fuse_groups(source: &Source, p: &mut Plan) -> Result<(), Error> {
    // Source index → plan index.
    let mut plan_of = vec![usize::MAX; source.tensors.len()];
    for (i, pt) in p.tensors.iter().enumerate() {
        plan_of[pt.source] = i;
    }
    for group in source.fusable_groups() {
        let members: Vec<usize> = group.iter().map(|&s| plan_of[s]).collect();
        if members.contains(&usize::MAX) {
            continue;
        }
        let first = &p.tensors[members[0]];
        let ty = source.tensors[first.source].ggml_type;
        let candidates: Vec<Member<'_>> = members
            .iter()
            .map(|&i| {
                let pt = &p.tensors[i];
                let t = &source.tensors[pt.source];
                Member {
                    ty: t.ggml_type,
                    dims: &t.dims,
                    layout: pt
                        .layout
                        .filter(|_| pt.placement == Placement::Native && pt.fuse == Fuse::None),
                }
            })
            .collect();
        let Some(layout) = first
            .layout
            .filter(|_| policy::fuses(Container::Gpack, &candidates))
        else {
            continue;
        };
        let total_rows: u64 = members.iter().map(|&i| p.tensors[i].rows).sum();
        let cols = first.cols;
        let size = native_len(ty, layout, total_rows, cols).map_err(|e| Error::Quant {
            tensor: source.tensors[first.source].name.clone(),
            source: e,
        })?;
        let mut row = 0;
        for (k, &i) in members.iter().enumerate() {
            let rows = p.tensors[i].rows;
            p.tensors[i].fuse = if k == 0 {
                Fuse::Carrier(members.clone())
            } else {
                Fuse::Member {
                    carrier: members[0],
                    row_start: row,
                }
            };
            row += rows;
        }
        p.tensors[members[0]].size = size;
    }
    // Lay the arena out again: carriers and unfused tensors get space,
    // members share their carrier's.
    p.native_size = 0;
    for i in 0..p.tensors.len() {
        let pt = &p.tensors[i];
        if pt.placement != Placement::Native || matches!(pt.fuse, Fuse::Member { .. }) {
            continue;
        }
        let o = align(p.native_size, NATIVE_ALIGN);
        p.native_size = o + pt.size;
        p.tensors[i].offset = o;
    }
    for i in 0..p.tensors.len() {
        if let Fuse::Member { carrier, .. } = p.tensors[i].fuse {
            p.tensors[i].offset = p.tensors[carrier].offset;
            p.tensors[i].size = p.tensors[carrier].size;
        }
    }
    Ok(())
}

impl PlannedTensor {
    /// Rows of the native tensor this entry's bytes hold (fused: all members').
    pub fn stored_rows(&self, plan: &Plan) -> u64 {
        match &self.fuse {
            Fuse::Carrier(m) => m.iter().map(|&i| plan.tensors[i].rows).sum(),
            Fuse::Member { carrier, .. } => plan.tensors[*carrier].stored_rows(plan),
            Fuse::None => self.rows,
        }
    }

    /// First row of this tensor inside its stored native tensor.
    pub fn row_start(&self) -> u64 {
        match self.fuse {
            Fuse::Member { row_start, .. } => row_start,
            _ => 0,
        }
    }
}

/// Whether `t` is stored as raw ggml blocks (no exact native layout).
pub fn is_raw_ggml(layout: Option<Layout>) -> Option<GgmlType> {
    match layout {
        Some(Layout::Ggml(t)) => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use gpack_ingest::{Metadata, Value};

    /// A GGUF of one stacked-expert tensor `name` (tiny F32) and `block_count`.
    fn moe_gguf(dir: &std::path::Path, name: &str, block_count: u32) -> std::path::PathBuf {
        let path = dir.join("m.gguf");
        let headers = vec![TensorHeader {
            name: name.into(),
            ggml_type: GgmlType::F32,
            dims: vec![32, 2, 2],
        }];
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("qwen3moe".into()));
        md.insert("qwen3moe.block_count", Value::U32(block_count));
        let f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut w = Writer::new(f, &md, &headers).unwrap();
        w.write_tensor_data(&[0u8; 32 * 2 * 2 * 4]).unwrap();
        w.finish().unwrap();
        path
    }

    /// Layer numbers from tensor names and block_count from the metadata
    /// sized the expert table unchecked: `blk.4294967295` overflowed
    /// `max_layer + 1` and a block_count of 2^32-1 asked for a 100 GB table.
    /// Both are named errors now.
    #[test]
    fn absurd_layer_numbers_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let ok = moe_gguf(dir.path(), "blk.3.ffn_gate_exps.weight", 4);
        let src = Source::open(&ok).unwrap();
        assert!(plan(&src, Quant::Keep, false, false, false).is_ok());
        for (name, bc) in [
            ("blk.4294967295.ffn_gate_exps.weight", 4),
            ("blk.4096.ffn_up_exps.weight", 4),
            ("blk.0.ffn_down_exps.weight", u32::MAX),
        ] {
            let p = moe_gguf(dir.path(), name, bc);
            let src = Source::open(&p).unwrap();
            let e = plan(&src, Quant::Keep, false, false, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("4096"), "{name} / {bc}: {e}");
        }
    }
}
