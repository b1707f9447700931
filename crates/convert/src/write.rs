//! Executing a plan: the sections are written in kind order, each tensor read,
//! transcoded into its section and dropped.

use crate::plan::{self, Fuse, Placement, PlannedTensor, NATIVE_ALIGN};
use crate::policy::Quant;
use crate::{Error, OptionProblem, TensorProblem};
use gpack_format::payload::{
    self, BlobEntry, ExpertFile, ExpertLayout, ExpertSlice, KvRecord, TensorEntry,
};
use gpack_format::raw::SingleTensorHeaderV1;
use gpack_format::{GpackWriter, ManifestInput, SectionKind, SectionWriter, WriteOptions};
use gpack_ingest::{GgmlType, Source, SourceKind, TensorInfo};
use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to convert and how.
#[derive(Clone, Debug, Default)]
pub struct ConvertOptions {
    /// A GGUF file (any shard of a split), a safetensors file, an
    /// `index.json` or a Hugging Face directory.
    pub source: PathBuf,
    /// The .gpack to write.
    pub output: PathBuf,
    /// Model name for the manifest (default: `general.name` or the file stem).
    pub name: Option<String>,
    /// Weight layout.
    pub quant: Quant,
    /// Keep routed experts in the source GGUF shards next to the output.
    pub external_experts: bool,
    /// Replace an existing output.
    pub force: bool,
    /// A draft (multi-token-prediction) module to pack into the Mtp section: a
    /// directory of safetensors files, or a GGUF file / a directory holding one.
    pub mtp_dir: Option<PathBuf>,
    /// A whole draft model for speculative decoding (GGUF or HF directory;
    /// its vocabulary must be the source's): its tensors go to the Mtp
    /// section, its hyperparameters to MetadataKv under [`DRAFT_PREFIX`].
    pub draft: Option<PathBuf>,
}

/// MetadataKv key prefix of a packed draft model's own keys.
pub use gpack_format::payload::DRAFT_KEY_PREFIX as DRAFT_PREFIX;

/// Progress callbacks (called from the converting thread).
pub trait Progress: Sync {
    /// A section of `bytes` bytes starts.
    fn section(&self, _name: &str, _bytes: u64) {}
    /// `bytes` more bytes were written.
    fn advance(&self, _bytes: u64) {}
}

impl Progress for () {}

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
}

/// One stacked expert tensor of a layer: its info, bytes and plan.
type ExpertSource<'s> = (
    &'s TensorInfo,
    std::borrow::Cow<'s, [u8]>,
    &'s PlannedTensor,
);

/// Writes `rows × cols` elements of `src_type` as `p`'s decision says
/// ([`crate::encode::encode`], bounded memory), with the f16 copy of the
/// scales where [`plan::with_f16_scales`] says so.
fn write_layout(
    name: &str,
    src_type: GgmlType,
    bytes: &[u8],
    rows: u64,
    cols: u64,
    p: &PlannedTensor,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let q = |source| Error::Quant {
        tensor: name.to_string(),
        source,
    };
    let Some(d) = p.decision() else {
        return Err(Error::Tensor {
            tensor: name.to_string(),
            problem: TensorProblem::NoNativeLayout,
        });
    };
    let f16 = plan::with_f16_scales(src_type, d.layout);
    crate::encode::encode(src_type, bytes, rows, cols, d, f16, w).map_err(q)
}

struct Counting<'a, 'w, P: Progress + ?Sized> {
    s: &'a mut SectionWriter<'w>,
    progress: &'a P,
}

impl<P: Progress + ?Sized> Write for Counting<'_, '_, P> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.s.write_all(buf)?;
        self.progress.advance(buf.len() as u64);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn tensor_bytes<'s>(
    source: &'s Source,
    t: &TensorInfo,
) -> Result<std::borrow::Cow<'s, [u8]>, Error> {
    Ok(source.tensor_bytes(t)?)
}

/// Drops a finished tensor's source pages from the resident set, so the
/// conversion's memory stays about one tensor whatever the model size.
fn release(source: &Source, t: &TensorInfo) {
    for r in t.source_ranges() {
        if let Some(f) = source.files.get(r.file) {
            f.release(r.offset, r.size);
        }
    }
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

/// Converts a model into a .gpack file.
pub fn convert(opts: &ConvertOptions, progress: &dyn Progress) -> Result<Report, Error> {
    let start = std::time::Instant::now();
    if !opts.force && opts.output.exists() {
        return Err(Error::OutputExists(opts.output.clone()));
    }
    let mut source = Source::open(&opts.source)?;
    if opts.external_experts && source.kind != SourceKind::Gguf {
        return Err(OptionProblem::ExternalNeedsGguf.into());
    }
    // The model's own MTP blocks go to the Mtp section, not the trunk's.
    let mut mtp_block = take_mtp_blocks(&mut source);
    let plan = plan::plan(&source, opts.quant, opts.external_experts)?;
    if opts.draft.is_some() && opts.mtp_dir.is_some() {
        return Err(OptionProblem::DraftAndMtpDir.into());
    }
    if let Some((blocks, trunk, _)) = &mtp_block {
        let option = match (&opts.draft, &opts.mtp_dir) {
            (Some(_), _) => Some("--draft"),
            (None, Some(_)) => Some("--mtp-dir"),
            (None, None) => None,
        };
        if let Some(option) = option {
            return Err(OptionProblem::MtpBlockAndDraft {
                option,
                model: opts.source.clone(),
                blocks: *blocks,
                trunk: *trunk,
            }
            .into());
        }
    }
    let draft = match &opts.draft {
        Some(d) => Some(open_draft(d, &source)?),
        None => None,
    };
    for f in &source.files {
        f.advise_sequential();
    }
    if opts.external_experts && plan.experts.n_expert == 0 {
        return Err(OptionProblem::ExternalWithoutExperts.into());
    }

    let mut w = GpackWriter::create(
        &opts.output,
        WriteOptions {
            replace: opts.force,
        },
    )?;
    let mut sections = Vec::new();
    let mut record = |kind: SectionKind, size: u64, items: u64| {
        sections.push(SectionReport {
            kind: kind.spec_name(),
            name: kind.default_name().to_string(),
            size,
            items,
        })
    };

    // 0 MetadataKv: every source key, in source order; then a draft
    // model's keys but its tokenizer's, prefixed.
    let draft_keys = draft.iter().flat_map(|d| {
        d.metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("tokenizer."))
            .map(|(k, v)| (format!("{DRAFT_PREFIX}{k}"), v))
    });
    let values: Vec<(String, u32, Vec<u8>)> = source
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(draft_keys)
        .map(|(k, v)| (k, v.value_type().id(), gpack_ingest::gguf::encode_value(v)))
        .collect();
    let kv = payload::encode_kv(values.iter().map(|(k, t, v)| KvRecord {
        key: k,
        value_type: *t,
        value: v,
    }));
    w.add_section(
        SectionKind::MetadataKv,
        "metadata_kv",
        &kv,
        values.len() as u64,
    )?;
    record(
        SectionKind::MetadataKv,
        kv.len() as u64,
        values.len() as u64,
    );
    drop(values);

    // 1 TensorIndex.
    let entries: Vec<TensorEntry> = plan
        .tensors
        .iter()
        .map(|pt| {
            let t = &source.tensors[pt.source];
            let (offset, size) = match pt.placement {
                Placement::Experts => (0, pt.size * t.dims[2]),
                _ => (pt.offset, pt.size),
            };
            TensorEntry {
                name: t.name.clone(),
                dims: t.dims.clone(),
                src_type: t.ggml_type.id(),
                section: pt.placement.section(opts.external_experts) as u32,
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
    w.add_section(
        SectionKind::TensorIndex,
        "tensor_index",
        &ti,
        entries.len() as u64,
    )?;
    record(
        SectionKind::TensorIndex,
        ti.len() as u64,
        entries.len() as u64,
    );
    // Positions in the (name-sorted) index, for the blob indexes.
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

    // 2 DenseIndex + 3 DensePack.
    let dense: Vec<(usize, &PlannedTensor)> = plan
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, p)| p.placement == Placement::Dense)
        .collect();
    if !dense.is_empty() {
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
        w.add_section(SectionKind::DenseIndex, "dense_index", &b, idx.len() as u64)?;
        record(SectionKind::DenseIndex, b.len() as u64, idx.len() as u64);
        progress.section("dense", plan.dense_size);
        let mut s = w.begin_section(SectionKind::DensePack, "dense_pack")?;
        for (_, p) in &dense {
            s.pad_to(plan::DENSE_ALIGN)?;
            let t = &source.tensors[p.source];
            let bytes = tensor_bytes(&source, t)?;
            s.write_bytes(&bytes)?;
            progress.advance(bytes.len() as u64);
            drop(bytes);
            release(&source, t);
        }
        s.finish(dense.len() as u64)?;
        record(SectionKind::DensePack, plan.dense_size, dense.len() as u64);
    }

    // 4 NativeDenseIndex + 5 NativeDense.
    // One arena tensor per unfused matrix and per fused group (its carrier).
    let native: Vec<(usize, &PlannedTensor)> = plan
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, p)| p.placement == Placement::Native && !matches!(p.fuse, Fuse::Member { .. }))
        .collect();
    if !native.is_empty() {
        let idx: Vec<BlobEntry> = native
            .iter()
            .map(|(i, p)| BlobEntry {
                tensor: index_pos[*i],
                layout: p.layout_code(),
                offset: p.offset,
                size: p.size,
                rows: p.stored_rows(&plan),
                cols: p.cols,
            })
            .collect();
        let b = payload::encode_blob_index(payload::NATIVE_INDEX_MAGIC, plan.native_size, &idx);
        w.add_section(
            SectionKind::NativeDenseIndex,
            "native_dense_index",
            &b,
            idx.len() as u64,
        )?;
        record(
            SectionKind::NativeDenseIndex,
            b.len() as u64,
            idx.len() as u64,
        );
        progress.section("weights", plan.native_size);
        let mut s = w.begin_section(SectionKind::NativeDense, "native_dense")?;
        for (_, p) in &native {
            s.pad_to(NATIVE_ALIGN)?;
            let t = &source.tensors[p.source];
            let rows = p.stored_rows(&plan);
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
                tensor_bytes(&source, t)?
            } else {
                let mut all = Vec::new();
                for m in &members {
                    all.extend_from_slice(&tensor_bytes(&source, m)?);
                }
                std::borrow::Cow::Owned(all)
            };
            let mut c = Counting {
                s: &mut s,
                progress,
            };
            let n = write_layout(&t.name, t.ggml_type, &bytes, rows, p.cols, p, &mut c)?;
            debug_assert_eq!(n, p.size);
            drop(bytes);
            for m in members {
                release(&source, m);
            }
        }
        s.finish(native.len() as u64)?;
        record(
            SectionKind::NativeDense,
            plan.native_size,
            native.len() as u64,
        );
    }

    // 6 Embed, 7 Head, 8 Ple.
    for (placement, kind) in [
        (Placement::Embed, SectionKind::Embed),
        (Placement::Head, SectionKind::Head),
        (Placement::Ple, SectionKind::Ple),
    ] {
        let Some(p) = plan.tensors.iter().find(|p| p.placement == placement) else {
            continue;
        };
        let t = &source.tensors[p.source];
        progress.section(kind.default_name(), p.size);
        let mut s = w.begin_section(kind, kind.default_name())?;
        // Layout tag 1: a native tensor; 0: raw ggml blocks (the PLE table).
        let tag = u32::from(p.layout.is_some());
        s.write_bytes(&SingleTensorHeaderV1::encode(
            t.ggml_type.id(),
            tag,
            p.cols,
            p.rows,
            p.size,
        ))?;
        let bytes = tensor_bytes(&source, t)?;
        match p.layout {
            Some(_) => {
                let mut c = Counting {
                    s: &mut s,
                    progress,
                };
                write_layout(&t.name, t.ggml_type, &bytes, p.rows, p.cols, p, &mut c)?;
            }
            None => s.write_bytes(&bytes)?,
        }
        drop(bytes);
        release(&source, t);
        s.finish(1)?;
        record(kind, 64 + p.size, 1);
    }

    // 9 ExpertLayout + 10 ExpertBlobs.
    let ex = &plan.experts;
    if ex.n_expert > 0 {
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
        let b = layout.encode();
        let items = u64::from(ex.n_layers) * u64::from(ex.n_expert);
        w.add_section(SectionKind::ExpertLayout, "expert_layout", &b, items)?;
        record(SectionKind::ExpertLayout, b.len() as u64, items);
        if !opts.external_experts {
            progress.section("experts", ex.blob_size);
            let mut s = w.begin_section(SectionKind::ExpertBlobs, "expert_blobs")?;
            for parts in &ex.parts {
                let srcs: Vec<Option<ExpertSource<'_>>> = parts
                    .iter()
                    .map(|pi| {
                        pi.map(|pi| {
                            let p = &plan.tensors[pi];
                            let t = &source.tensors[p.source];
                            tensor_bytes(&source, t).map(|b| (t, b, p))
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
                        let mut c = Counting {
                            s: &mut s,
                            progress,
                        };
                        write_layout(&t.name, t.ggml_type, part, p.rows, p.cols, p, &mut c)?;
                    }
                }
                for (t, _, _) in srcs.iter().flatten() {
                    release(&source, t);
                }
            }
            s.finish(items)?;
            record(SectionKind::ExpertBlobs, ex.blob_size, items);
        }
    }

    // 11 TokenizerBin.
    if let Some(gbt1) = crate::tokenizer::build(&source)? {
        w.add_section(
            SectionKind::TokenizerBin,
            "tokenizer_bin",
            &gbt1.bytes,
            gbt1.vocab_size,
        )?;
        record(
            SectionKind::TokenizerBin,
            gbt1.bytes.len() as u64,
            gbt1.vocab_size,
        );
    }

    // 12 TokenizerAssets.
    if !source.assets.is_empty() {
        let b = payload::encode_assets(
            source
                .assets
                .iter()
                .map(|a| (a.name.as_str(), a.bytes.as_slice())),
        );
        let n = source.assets.len() as u64;
        w.add_section(SectionKind::TokenizerAssets, "tokenizer_assets", &b, n)?;
        record(SectionKind::TokenizerAssets, b.len() as u64, n);
    }

    // 13 Mtp: the draft module, with its own tensor index.
    let mut mtp_desc = serde_json::Value::Null;
    if let Some(dir) = &opts.mtp_dir {
        let (n, size) = write_mtp(
            &open_mtp(dir)?,
            "--mtp-dir",
            dir,
            opts.quant,
            &mut w,
            progress,
            false,
        )?;
        record(SectionKind::Mtp, size, n);
        mtp_desc = serde_json::json!({"path": dir.display().to_string(), "tensors": n});
    }
    if let Some((blocks, trunk, tensors)) = &mut mtp_block {
        // The blocks' tensors stand in for the trunk's while they are written.
        std::mem::swap(&mut source.tensors, tensors);
        let written = write_mtp(
            &source,
            "the model's MTP block",
            &opts.source,
            opts.quant,
            &mut w,
            progress,
            true,
        );
        std::mem::swap(&mut source.tensors, tensors);
        let (n, size) = written?;
        record(SectionKind::Mtp, size, n);
        mtp_desc = serde_json::json!({
            "role": "mtp",
            "blocks": *blocks,
            "after_layers": *trunk,
            "tensors": n,
        });
    }
    if let (Some(d), Some(path)) = (&draft, &opts.draft) {
        let (n, size) = write_mtp(d, "--draft", path, opts.quant, &mut w, progress, false)?;
        record(SectionKind::Mtp, size, n);
        mtp_desc = serde_json::json!({
            "role": "draft",
            "path": path.display().to_string(),
            "architecture": d.architecture().unwrap_or(""),
            "tensors": n,
            "metadata_prefix": DRAFT_PREFIX,
        });
    }

    let source_desc = serde_json::json!({
        "format": match source.kind { SourceKind::Gguf => "gguf", _ => "safetensors" },
        "path": opts.source.display().to_string(),
        "files": source.files.iter().map(|f| serde_json::json!({
            "name": f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            "size": f.len(),
        })).collect::<Vec<_>>(),
    });
    let name = opts
        .name
        .clone()
        .or_else(|| source.metadata.get_str("general.name").map(str::to_string))
        .unwrap_or_else(|| {
            opts.output
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    let stored_as_ggml: Vec<String> = plan
        .tensors
        .iter()
        .filter(|p| plan::is_raw_ggml(p.layout).is_some())
        .map(|p| source.tensors[p.source].name.clone())
        .collect();
    let written = w.finish(&ManifestInput {
        name,
        architecture: source.architecture().unwrap_or("").to_string(),
        source: source_desc.clone(),
        extra: [(
            "convert".to_string(),
            serde_json::json!({
                "quant": opts.quant.name(),
                "external_experts": opts.external_experts,
                "tensors": plan.tensors.len(),
                "stored_as_ggml_blocks": stored_as_ggml.len(),
                "mtp": mtp_desc,
            }),
        )]
        .into(),
    })?;
    let tensors = plan
        .tensors
        .iter()
        .map(|p| {
            let t = &source.tensors[p.source];
            TensorReport {
                name: t.name.clone(),
                source_type: t.ggml_type.name(),
                dims: t.dims.clone(),
                placement: p.placement,
                section: p.placement.section(opts.external_experts).default_name(),
                layout: p.layout.map_or("raw", |l| l.name()),
                bytes: if matches!(p.fuse, Fuse::Member { .. }) {
                    0
                } else if p.placement == Placement::Experts {
                    if opts.external_experts {
                        0
                    } else {
                        p.size * t.dims[2]
                    }
                } else {
                    p.size
                },
            }
        })
        .collect();
    Ok(Report {
        schema: "gpack.convert.v1",
        output: written.path.display().to_string(),
        size: written.size,
        digest: hex::encode(written.digest),
        source: source_desc,
        quant: opts.quant.name(),
        external_experts: opts.external_experts,
        sections,
        tensors,
        stored_as_ggml_blocks: stored_as_ggml,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Opens a draft module: a directory of safetensors, a GGUF file, or a
/// directory holding exactly one GGUF (or the shards of one).
fn open_mtp(dir: &Path) -> Result<Source, Error> {
    if dir.is_dir() {
        let mut ggufs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| OptionProblem::MtpDirUnreadable {
                dir: dir.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        ggufs.sort();
        if let Some(first) = ggufs.first() {
            return Ok(Source::open(first)?);
        }
    }
    Ok(Source::open(dir)?)
}

/// Opens a draft model and checks it can draft for `target`: a model of
/// its own (an architecture) with the target's vocabulary, token for token.
fn open_draft(path: &Path, target: &Source) -> Result<Source, Error> {
    let d = Source::open(path)?;
    let draft = || path.to_path_buf();
    if d.architecture().is_none() {
        return Err(OptionProblem::DraftNotAModel { draft: draft() }.into());
    }
    let (Some(t), Some(dt)) = (
        crate::tokenizer::build(target)?,
        crate::tokenizer::build(&d)?,
    ) else {
        return Err(OptionProblem::DraftWithoutTokenizer { draft: draft() }.into());
    };
    let (t, dt) = (
        gpack_tokenizer::Tokenizer::from_bytes(&t.bytes).map_err(Error::Tokenizer)?,
        gpack_tokenizer::Tokenizer::from_bytes(&dt.bytes).map_err(Error::Tokenizer)?,
    );
    if let Some(id) = t.vocab_difference(&dt) {
        return Err(OptionProblem::DraftVocabulary {
            draft: draft(),
            id,
            draft_token: dt.token_text(id).unwrap_or_default(),
            model_token: t.token_text(id).unwrap_or_default(),
        }
        .into());
    }
    Ok(d)
}

/// Takes the tensors of `source`'s multi-token-prediction blocks out of it
/// (`blk.N.*` for `N` from `block_count - {arch}.nextn_predict_layers` on):
/// `(blocks, trunk layers, tensors)`, or `None` when it has none. The
/// metadata keeps both keys: the runtime finds the blocks' tensors in the Mtp
/// section.
fn take_mtp_blocks(source: &mut Source) -> Option<(u32, u32, Vec<gpack_ingest::TensorInfo>)> {
    let arch = source.architecture()?.to_string();
    let blocks = source
        .metadata
        .get_u32(&format!("{arch}.nextn_predict_layers"))
        .filter(|&n| n > 0)?;
    let trunk = source
        .metadata
        .get_u32(&format!("{arch}.block_count"))?
        .checked_sub(blocks)?;
    let is_mtp = |name: &str| {
        name.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|l| l.parse::<u32>().ok())
            .is_some_and(|l| l >= trunk)
    };
    let (mtp, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut source.tensors)
        .into_iter()
        .partition(|t| is_mtp(&t.name));
    source.tensors = rest;
    if mtp.is_empty() {
        return None;
    }
    Some((blocks, trunk, mtp))
}

/// Writes the Mtp section from `src` (given by `option` `dir`, as errors name it); returns
/// (tensors, payload bytes). Routed experts (a model's own MTP block) are
/// stored as one native matrix per stacked tensor, `rows × n_expert` rows,
/// each expert a whole row range of it.
fn write_mtp(
    src: &Source,
    option: &'static str,
    dir: &Path,
    quant: Quant,
    w: &mut GpackWriter,
    progress: &dyn Progress,
    stacked_experts: bool,
) -> Result<(u64, u64), Error> {
    if src.tensors.is_empty() {
        return Err(OptionProblem::DraftEmpty {
            option,
            path: dir.to_path_buf(),
        }
        .into());
    }
    let mut mtp_plan = plan::plan(src, quant, false)?;
    for p in &mut mtp_plan.tensors {
        if p.placement != Placement::Experts {
            continue;
        }
        let t = &src.tensors[p.source];
        if !stacked_experts {
            return Err(Error::Tensor {
                tensor: t.name.clone(),
                problem: TensorProblem::DraftExperts,
            });
        }
        // The stacked tensor as one matrix (`Placement::Native`).
        p.placement = Placement::Native;
        p.rows = t.dims.iter().skip(1).product::<u64>();
    }
    // Offsets in the data area: every tensor 256-aligned; matrices native,
    // everything else raw.
    let mut entries = Vec::with_capacity(mtp_plan.tensors.len());
    let mut pos = 0u64;
    for p in &mtp_plan.tensors {
        let t = &src.tensors[p.source];
        let native = p.placement != Placement::Dense;
        // Draft tensors are stored one by one (no fused groups).
        let size = match p.layout {
            Some(l) if native => {
                plan::native_len(t.ggml_type, l, p.rows, p.cols).map_err(|e| Error::Quant {
                    tensor: t.name.clone(),
                    source: e,
                })?
            }
            _ => t.size,
        };
        pos = pos.div_ceil(payload::MTP_ALIGN) * payload::MTP_ALIGN;
        entries.push(TensorEntry {
            name: t.name.clone(),
            dims: t.dims.clone(),
            src_type: t.ggml_type.id(),
            section: SectionKind::Mtp as u32,
            layout: if native {
                p.layout_code()
            } else {
                payload::LAYOUT_GGML
            },
            group: if native {
                p.layout.map_or(0, |l| l.group())
            } else {
                0
            },
            offset: pos,
            size,
            row_start: 0,
            flags: 0,
        });
        pos += entries.last().map_or(0, |e| e.size);
    }
    let (head, data_start) = payload::encode_mtp_head(&payload::encode_tensor_index(&entries));
    progress.section("mtp", pos);
    let mut s = w.begin_section(SectionKind::Mtp, "mtp")?;
    s.write_bytes(&head)?;
    for (p, e) in mtp_plan.tensors.iter().zip(&entries) {
        let t = &src.tensors[p.source];
        s.pad_to(payload::MTP_ALIGN)?;
        debug_assert_eq!(s.len(), data_start + e.offset);
        let bytes = tensor_bytes(src, t)?;
        if e.layout == payload::LAYOUT_GGML {
            s.write_bytes(&bytes)?;
        } else {
            let mut c = Counting {
                s: &mut s,
                progress,
            };
            write_layout(&t.name, t.ggml_type, &bytes, p.rows, p.cols, p, &mut c)?;
        }
        drop(bytes);
        release(src, t);
    }
    let size = s.len();
    s.finish(entries.len() as u64)?;
    Ok((entries.len() as u64, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use gpack_ingest::{Metadata, Value};
    use std::io::BufWriter;

    /// Columns and rows of each synthetic matrix: 64 Mi weights, 256 MiB as f32.
    const COLS: u64 = 4096;
    const ROWS: u64 = 16384;

    /// A GGUF with one Q8_0 and one Q4_K matrix of `COLS × ROWS` (random
    /// codes, small finite scales). Returns the larger tensor's bytes.
    fn make_synthetic(path: &Path) -> u64 {
        let tensors = [
            ("blk.0.ffn_up.weight", GgmlType::Q8_0, 2usize),
            ("blk.0.ffn_down.weight", GgmlType::Q4_K, 4),
        ];
        let headers: Vec<TensorHeader> = tensors
            .iter()
            .map(|&(n, ty, _)| TensorHeader {
                name: n.into(),
                ggml_type: ty,
                dims: vec![COLS, ROWS],
            })
            .collect();
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("llama".into()));
        let f = BufWriter::new(std::fs::File::create(path).unwrap());
        let mut w = Writer::new(f, &md, &headers).unwrap();
        let mut seed = 1u64;
        let mut largest = 0;
        for (_, ty, scale_bytes) in tensors {
            let mut buf = vec![0u8; ty.bytes_for(COLS * ROWS).unwrap() as usize];
            for c in buf.chunks_mut(8) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                c.copy_from_slice(&seed.to_le_bytes()[..c.len()]);
            }
            // Each block's leading f16 scale(s) (Q8_0: d; Q4_K: d, dmin) = 2^-7.
            for blk in buf.chunks_mut(ty.block().1 as usize) {
                for s in blk[..scale_bytes].chunks_mut(2) {
                    s.copy_from_slice(&0x2000u16.to_le_bytes());
                }
            }
            largest = largest.max(buf.len() as u64);
            w.write_tensor_data(&buf).unwrap();
        }
        w.finish().unwrap();
        largest
    }

    /// See: issue 13, item 4 ("re-quantize in bounded chunks"): `convert
    /// --quant int4|int8` of a GGUF whose matrices are 256 MiB each as f32
    /// (Q8_0 → int4 and Q4_K → int8 are re-quantized; the others are exact)
    /// peaks at the largest source tensor plus 64 MiB, under the f32 size of
    /// one tensor (dequantizing a whole tensor, as convert did, held twice
    /// that: the f32 values and their byte copy). As
    /// `giw_streaming_peak_rss_is_bounded`:
    /// the conversions run in a child process (this test re-executed), so
    /// its VmHWM is theirs alone.
    #[test]
    fn convert_requantize_peak_rss_is_bounded() {
        if let Ok(src) = std::env::var("CONVERT_RSS_CHILD") {
            let src = PathBuf::from(src);
            for quant in [Quant::Int4, Quant::Int8] {
                let opts = ConvertOptions {
                    source: src.clone(),
                    output: src.with_extension(format!("{quant}.gpack")),
                    quant,
                    force: true,
                    ..Default::default()
                };
                let r = convert(&opts, &()).unwrap();
                let requantized: Vec<&str> = r
                    .tensors
                    .iter()
                    .filter(|t| matches!(t.layout, "I4Asym/G32" | "I8Sym/G32"))
                    .map(|t| t.source_type)
                    .collect();
                // One of the two is re-quantized, the other transcoded exactly.
                let want = if quant == Quant::Int4 { "Q8_0" } else { "Q4_K" };
                assert_eq!(requantized, [want], "{quant}");
            }
            println!("CONVERT_VMHWM_KB={}", crate::vm_hwm_kb());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("syn.gguf");
        let largest = make_synthetic(&src);
        let f32_bytes = COLS * ROWS * 4;
        let bound = largest + (64 << 20);
        assert!(bound < f32_bytes, "bound {bound} vs f32 {f32_bytes}");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "write::tests::convert_requantize_peak_rss_is_bounded",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CONVERT_RSS_CHILD", &src)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kb: u64 = stdout
            .lines()
            .find_map(|l| l.split_once("CONVERT_VMHWM_KB=").map(|(_, v)| v))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("child did not report VmHWM: {stdout}"));
        eprintln!(
            "convert --quant int4/int8 of two {} MiB-as-f32 matrices: peak RSS {} MiB (bound {} MiB = largest source tensor {} MiB + 64 MiB)",
            f32_bytes >> 20,
            kb / 1024,
            bound >> 20,
            largest >> 20
        );
        assert!(
            kb * 1024 <= bound,
            "peak RSS {} KiB > bound {} KiB",
            kb,
            bound / 1024
        );
    }
}
