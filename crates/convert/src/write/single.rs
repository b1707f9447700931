//! The single-tensor sections 6 Embed, 7 Head and 8 Ple: a 64-byte
//! [`SingleTensorHeaderV1`], then the tensor (docs/FORMAT.md, "Single-tensor
//! sections").

use super::input::Input;
use super::output::Output;
use super::{importance, tensor};
use crate::plan::Placement;
use crate::Error;
use gpack_format::raw::SingleTensorHeaderV1;
use gpack_format::SectionKind;

/// Writes Embed, Head and Ple, each when the plan has its tensor.
pub(super) fn write(out: &mut Output<'_>, input: &Input) -> Result<(), Error> {
    let (source, plan) = (&input.source, &input.plan);
    for (placement, kind) in [
        (Placement::Embed, SectionKind::Embed),
        (Placement::Head, SectionKind::Head),
        (Placement::Ple, SectionKind::Ple),
    ] {
        let Some(p) = plan.tensors.iter().find(|p| p.placement == placement) else {
            continue;
        };
        let t = &source.tensors[p.source];
        let progress = out.progress;
        let mut s = out.begin(kind, kind.default_name(), p.size)?;
        // Layout tag 1: a native tensor; 0: raw ggml blocks (the PLE table).
        let tag = u32::from(p.layout.is_some());
        s.write_bytes(&SingleTensorHeaderV1::encode(
            t.ggml_type.id(),
            tag,
            p.cols,
            p.rows,
            p.size,
        ))?;
        let bytes = tensor::bytes(source, t)?;
        match p.layout {
            Some(_) => {
                let members = [(t.name.as_str(), p.rows)];
                let runs = importance::runs(input.imatrix.as_ref(), &members, p.cols, None);
                tensor::write_native(&mut s, progress, t, &bytes, p.rows, p, &runs)?;
            }
            None => s.write_bytes(&bytes)?,
        }
        drop(bytes);
        tensor::release(source, t);
        s.finish(1)?;
        out.record(kind, 64 + p.size, 1);
    }
    Ok(())
}
