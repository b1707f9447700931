//! The two arenas and their indexes: sections 2 DenseIndex + 3 DensePack
//! (vectors and other small tensors, raw) and 4 NativeDenseIndex + 5
//! NativeDense (matmul weights in native layouts). Each arena's index comes
//! first, so a reader finds every tensor before it maps the payload.

use super::input::Input;
use super::output::Output;
use super::{importance, tensor};
use crate::plan::{Fuse, Placement, PlannedTensor, DENSE_ALIGN, NATIVE_ALIGN};
use crate::Error;
use gpack_format::payload::{self, BlobEntry};
use gpack_format::SectionKind;
use gpack_ingest::TensorInfo;
use std::borrow::Cow;

/// Writes DenseIndex and DensePack (neither when no tensor is dense):
/// every dense tensor's bytes as they are, 64-aligned. `index_pos` is each
/// planned tensor's position in TensorIndex.
pub(super) fn write_dense(
    out: &mut Output<'_>,
    input: &Input,
    index_pos: &[u32],
) -> Result<(), Error> {
    let (source, plan) = (&input.source, &input.plan);
    let dense: Vec<(usize, &PlannedTensor)> = plan
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, p)| p.placement == Placement::Dense)
        .collect();
    if dense.is_empty() {
        return Ok(());
    }
    let idx: Vec<BlobEntry> = dense
        .iter()
        .map(|(i, p)| BlobEntry {
            tensor: index_pos[*i],
            layout: source.tensors[p.source].ggml_type.id(),
            offset: p.offset,
            size: p.size,
            rows: p.rows,
            cols: p.cols,
        })
        .collect();
    let b = payload::encode_blob_index(payload::DENSE_INDEX_MAGIC, plan.dense_size, &idx);
    out.add(SectionKind::DenseIndex, &b, idx.len() as u64)?;
    let progress = out.progress;
    let mut s = out.begin(SectionKind::DensePack, "dense", plan.dense_size)?;
    for (_, p) in &dense {
        s.pad_to(DENSE_ALIGN)?;
        let t = &source.tensors[p.source];
        let bytes = tensor::bytes(source, t)?;
        s.write_bytes(&bytes)?;
        progress.advance(bytes.len() as u64);
        drop(bytes);
        tensor::release(source, t);
    }
    s.finish(dense.len() as u64)?;
    out.record(SectionKind::DensePack, plan.dense_size, dense.len() as u64);
    Ok(())
}

/// Writes NativeDenseIndex and NativeDense (neither when no tensor is
/// native): one arena tensor per unfused matrix and per fused group (its
/// carrier), 256-aligned, in the layout the plan chose.
pub(super) fn write_native(
    out: &mut Output<'_>,
    input: &Input,
    index_pos: &[u32],
) -> Result<(), Error> {
    let (source, plan) = (&input.source, &input.plan);
    let native: Vec<(usize, &PlannedTensor)> = plan
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, p)| p.placement == Placement::Native && !matches!(p.fuse, Fuse::Member { .. }))
        .collect();
    if native.is_empty() {
        return Ok(());
    }
    let idx: Vec<BlobEntry> = native
        .iter()
        .map(|(i, p)| BlobEntry {
            tensor: index_pos[*i],
            layout: p.layout_code(),
            offset: p.offset,
            size: p.size,
            rows: p.stored_rows(plan),
            cols: p.cols,
        })
        .collect();
    let b = payload::encode_blob_index(payload::NATIVE_INDEX_MAGIC, plan.native_size, &idx);
    out.add(SectionKind::NativeDenseIndex, &b, idx.len() as u64)?;
    let progress = out.progress;
    let mut s = out.begin(SectionKind::NativeDense, "weights", plan.native_size)?;
    for (_, p) in &native {
        s.pad_to(NATIVE_ALIGN)?;
        let t = &source.tensors[p.source];
        let rows = p.stored_rows(plan);
        // A fused group: the members' row-major blocks back to back are
        // the fused tensor's blocks.
        let members: Vec<&TensorInfo> = match &p.fuse {
            Fuse::Carrier(m) => m
                .iter()
                .map(|&i| &source.tensors[plan.tensors[i].source])
                .collect(),
            _ => vec![t],
        };
        let bytes = if members.len() == 1 {
            tensor::bytes(source, t)?
        } else {
            let mut all = Vec::new();
            for m in &members {
                all.extend_from_slice(&tensor::bytes(source, m)?);
            }
            Cow::Owned(all)
        };
        let names: Vec<(&str, u64)> = match &p.fuse {
            Fuse::Carrier(m) => m
                .iter()
                .map(|&i| {
                    let pt = &plan.tensors[i];
                    (source.tensors[pt.source].name.as_str(), pt.rows)
                })
                .collect(),
            _ => vec![(t.name.as_str(), rows)],
        };
        let runs = importance::runs(input.imatrix.as_ref(), &names, p.cols, None);
        let n = tensor::write_native(&mut s, progress, t, &bytes, rows, p, &runs)?;
        debug_assert_eq!(n, p.size);
        drop(bytes);
        for m in members {
            tensor::release(source, m);
        }
    }
    s.finish(native.len() as u64)?;
    out.record(
        SectionKind::NativeDense,
        plan.native_size,
        native.len() as u64,
    );
    Ok(())
}
