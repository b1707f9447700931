//! What a conversion did (`gpack convert --json`, schema `gpack.convert.v1`):
//! the report's types, and its rows of tensors.

use super::input::Input;
use crate::plan::{self, Fuse, Placement};
use serde::Serialize;

/// One section of the output, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct SectionReport {
    /// Seed name of the kind.
    pub kind: &'static str,
    /// Table name.
    pub name: String,
    /// Payload bytes.
    pub size: u64,
    /// Items.
    pub items: u64,
}

/// One tensor of the output, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct TensorReport {
    /// Name.
    pub name: String,
    /// Source ggml type.
    pub source_type: &'static str,
    /// Dimensions, ne0 first.
    pub dims: Vec<u64>,
    /// Where it went.
    pub placement: Placement,
    /// Section name.
    pub section: &'static str,
    /// Layout name (`"raw"` for raw bytes in DensePack or external references).
    pub layout: &'static str,
    /// Bytes stored in this file for it.
    pub bytes: u64,
}

/// What a conversion did (`gpack convert --json`, schema `gpack.convert.v1`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always `"gpack.convert.v1"`.
    pub schema: &'static str,
    /// Output path.
    pub output: String,
    /// Output size.
    pub size: u64,
    /// SHA-256 of the manifest (the file's digest).
    pub digest: String,
    /// Source path and format.
    pub source: serde_json::Value,
    /// `--quant`.
    pub quant: &'static str,
    /// Whether experts were left in the source shards.
    pub external_experts: bool,
    /// Sections written.
    pub sections: Vec<SectionReport>,
    /// Every tensor.
    pub tensors: Vec<TensorReport>,
    /// Tensors with no exact native layout, stored as their ggml blocks.
    pub stored_as_ggml_blocks: Vec<String>,
    /// Wall time.
    pub seconds: f64,
    /// The importance matrix given (`--imatrix`), if any.
    pub imatrix: Option<String>,
    /// The whole file's bits per weight: its size × 8 over every tensor's
    /// elements (llama-quantize's "BPW" counts the tensors' bytes only).
    pub bits_per_weight: f64,
    /// The weight matrices' bits per weight: the bytes stored for the
    /// matrices (native arena, experts, embedding, head; with their
    /// layouts' headers and scale copies) × 8 over their elements.
    pub weights_bits_per_weight: f64,
}

/// `(whole file, weight matrices)` bits per weight of a file of `size`
/// bytes holding `tensors` ([`Report::bits_per_weight`],
/// [`Report::weights_bits_per_weight`]).
pub(super) fn bits_per_weight(size: u64, tensors: &[TensorReport]) -> (f64, f64) {
    let elements = |t: &TensorReport| t.dims.iter().product::<u64>() as f64;
    let all: f64 = tensors.iter().map(elements).sum();
    let matrices = || tensors.iter().filter(|t| t.placement != Placement::Dense);
    let (w_bytes, w_elems) =
        matrices().fold((0u64, 0f64), |(b, e), t| (b + t.bytes, e + elements(t)));
    let ratio = |bits: f64, n: f64| if n > 0.0 { bits / n } else { 0.0 };
    (
        ratio(size as f64 * 8.0, all),
        ratio(w_bytes as f64 * 8.0, w_elems),
    )
}

/// Every planned tensor of `input`, in plan order: where it went and how
/// many bytes of this file it takes (none for a fused group's members,
/// whose carrier holds the group, nor for external experts).
pub(super) fn tensors(input: &Input, external_experts: bool) -> Vec<TensorReport> {
    let (source, plan) = (&input.source, &input.plan);
    plan.tensors
        .iter()
        .map(|p| {
            let t = &source.tensors[p.source];
            TensorReport {
                name: t.name.clone(),
                source_type: t.ggml_type.name(),
                dims: t.dims.clone(),
                placement: p.placement,
                section: p.placement.section(external_experts).default_name(),
                layout: p.layout.map_or("raw", |l| l.name()),
                bytes: if matches!(p.fuse, Fuse::Member { .. }) {
                    0
                } else if p.placement == Placement::Experts {
                    if external_experts {
                        0
                    } else {
                        p.size * t.dims[2]
                    }
                } else {
                    p.size
                },
            }
        })
        .collect()
}

/// The names of the tensors with no exact native layout, stored as their
/// ggml blocks ([`plan::is_raw_ggml`]), in plan order.
pub(super) fn stored_as_ggml_blocks(input: &Input) -> Vec<String> {
    input
        .plan
        .tensors
        .iter()
        .filter(|p| plan::is_raw_ggml(p.layout).is_some())
        .map(|p| input.source.tensors[p.source].name.clone())
        .collect()
}
