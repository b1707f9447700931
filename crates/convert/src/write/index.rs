//! Section 1, TensorIndex: one entry per planned tensor, where its bytes are
//! and in which layout.

use super::input::Input;
use super::output::Output;
use crate::plan::Placement;
use crate::Error;
use gpack_format::payload::{self, TensorEntry};
use gpack_format::SectionKind;

/// Writes TensorIndex. Returns each planned tensor's position in the
/// (name-sorted) index, which the blob indexes refer to it by.
pub(super) fn write(
    out: &mut Output<'_>,
    input: &Input,
    external_experts: bool,
) -> Result<Vec<u32>, Error> {
    let entries: Vec<TensorEntry> = input
        .plan
        .tensors
        .iter()
        .map(|pt| {
            let t = &input.source.tensors[pt.source];
            let (offset, size) = match pt.placement {
                Placement::Experts => (0, pt.size * t.dims[2]),
                _ => (pt.offset, pt.size),
            };
            TensorEntry {
                name: t.name.clone(),
                dims: t.dims.clone(),
                src_type: t.ggml_type.id(),
                section: pt.placement.section(external_experts) as u32,
                layout: pt.layout_code(),
                group: pt.layout.map_or(0, |l| l.group()),
                offset,
                size,
                row_start: pt.row_start(),
                flags: 0,
            }
        })
        .collect();
    let ti = payload::encode_tensor_index(&entries);
    out.add(SectionKind::TensorIndex, &ti, entries.len() as u64)?;
    let mut sorted: Vec<(&str, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut index_pos = vec![0u32; entries.len()];
    for (pos, (_, i)) in sorted.iter().enumerate() {
        index_pos[*i] = pos as u32;
    }
    Ok(index_pos)
}
