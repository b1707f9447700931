//! Sections 9 ExpertLayout and 10 ExpertBlobs: where each routed expert's
//! gate, up and down slices are, then (unless they stay in the source
//! shards, `--external-experts`) the slices themselves, one expert at a
//! time per layer.

use super::input::Input;
use super::options::ConvertOptions;
use super::output::Output;
use super::{importance, tensor};
use crate::plan::{PlannedTensor, NATIVE_ALIGN};
use crate::{Error, OptionProblem};
use gpack_format::payload::{self, ExpertFile, ExpertLayout, ExpertSlice};
use gpack_format::SectionKind;
use gpack_ingest::TensorInfo;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::path::Path;

/// One stacked expert tensor of a layer: its info, bytes and plan.
type ExpertSource<'s> = (&'s TensorInfo, Cow<'s, [u8]>, &'s PlannedTensor);

/// Writes ExpertLayout and ExpertBlobs (neither without routed experts;
/// no ExpertBlobs with `opts.external_experts`).
pub(super) fn write(
    out: &mut Output<'_>,
    input: &Input,
    opts: &ConvertOptions,
) -> Result<(), Error> {
    let (source, plan) = (&input.source, &input.plan);
    let ex = &plan.experts;
    if ex.n_expert == 0 {
        return Ok(());
    }
    let mut files: Vec<ExpertFile> = Vec::new();
    let mut file_index = std::collections::HashMap::new();
    let mut slices = Vec::with_capacity(ex.blob_offsets.len());
    for (layer, parts) in ex.parts.iter().enumerate() {
        for e in 0..ex.n_expert as u64 {
            for (part, pi) in parts.iter().enumerate() {
                let Some(pi) = pi else {
                    slices.push(ExpertSlice {
                        file: payload::EXPERT_ABSENT,
                        layout: payload::LAYOUT_GGML,
                        src_type: 0,
                        offset: 0,
                        size: 0,
                        rows: 0,
                        cols: 0,
                        sha256: [0; 32],
                    });
                    continue;
                };
                let p = &plan.tensors[*pi];
                let t = &source.tensors[p.source];
                let slot = (layer * ex.n_expert as usize + e as usize) * 3 + part;
                let (file, offset) = if opts.external_experts {
                    let f = *file_index.entry(t.file).or_insert_with(|| {
                        files.push(ExpertFile {
                            name: String::new(),
                            size: source.files[t.file].len(),
                        });
                        files.len() - 1
                    });
                    (f as u32, t.offset + e * p.size)
                } else {
                    (payload::EXPERT_EMBEDDED, ex.blob_offsets[slot])
                };
                slices.push(ExpertSlice {
                    file,
                    layout: p.layout_code(),
                    src_type: t.ggml_type.id(),
                    offset,
                    size: p.size,
                    rows: p.rows,
                    cols: p.cols,
                    sha256: [0; 32],
                });
            }
        }
    }
    if opts.external_experts {
        let mut shard_of = vec![0usize; files.len()];
        for (src_file, f) in &file_index {
            shard_of[*f] = *src_file;
        }
        for (f, file) in files.iter_mut().enumerate() {
            file.name = external_file_name(&source.files[shard_of[f]].path, &opts.output)?;
        }
        // Digest every external slice (checked at full verify).
        slices
            .par_iter_mut()
            .filter(|s| s.file != payload::EXPERT_ABSENT)
            .for_each(|s| {
                let bytes = source.files[shard_of[s.file as usize]].bytes();
                let r = &bytes[s.offset as usize..(s.offset + s.size) as usize];
                s.sha256 = Sha256::digest(r).into();
            });
    }
    let layout = ExpertLayout {
        n_layers: ex.n_layers,
        n_expert: ex.n_expert,
        files,
        slices,
    };
    let items = u64::from(ex.n_layers) * u64::from(ex.n_expert);
    out.add(SectionKind::ExpertLayout, &layout.encode(), items)?;
    if opts.external_experts {
        return Ok(());
    }
    let progress = out.progress;
    let mut s = out.begin(SectionKind::ExpertBlobs, "experts", ex.blob_size)?;
    for parts in &ex.parts {
        let srcs: Vec<Option<ExpertSource<'_>>> = parts
            .iter()
            .map(|pi| {
                pi.map(|pi| {
                    let p = &plan.tensors[pi];
                    let t = &source.tensors[p.source];
                    tensor::bytes(source, t).map(|b| (t, b, p))
                })
                .transpose()
            })
            .collect::<Result<_, _>>()?;
        for e in 0..ex.n_expert as u64 {
            for (t, bytes, p) in srcs.iter().flatten() {
                let slice_src = t.ggml_type.bytes_for(p.rows * p.cols).unwrap_or(0);
                let start = (e * slice_src) as usize;
                let part = &bytes[start..start + slice_src as usize];
                s.pad_to(NATIVE_ALIGN)?;
                let members = [(t.name.as_str(), p.rows)];
                let runs = importance::runs(input.imatrix.as_ref(), &members, p.cols, Some(e));
                tensor::write_native(&mut s, progress, t, part, p.rows, p, &runs)?;
            }
        }
        for (t, _, _) in srcs.iter().flatten() {
            tensor::release(source, t);
        }
    }
    s.finish(items)?;
    out.record(SectionKind::ExpertBlobs, ex.blob_size, items);
    Ok(())
}

/// The plain name of a file, required to sit next to the output.
fn external_file_name(shard: &Path, output: &Path) -> Result<String, Error> {
    let dir_of = |p: &Path| {
        let d = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf())
    };
    if dir_of(shard) != dir_of(output) {
        return Err(OptionProblem::ExternalNotBesideShards {
            shard_dir: dir_of(shard),
            output: output.to_path_buf(),
        }
        .into());
    }
    let name = shard
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| payload::is_plain_file_name(n))
        .ok_or_else(|| OptionProblem::ShardFileName {
            shard: shard.to_path_buf(),
        })?;
    Ok(name.to_string())
}
