//! Section 13 Mtp: a draft module with its own tensor index. It holds one
//! of three drafters, which exclude each other ([`super::input`] refuses
//! two): a module given with `--mtp-dir`, the model's own
//! multi-token-prediction blocks ([`super::input::MtpBlock`]), or a whole draft model (`--draft`, whose
//! hyperparameters go to MetadataKv, [`super::metadata`]).

use super::input::Input;
use super::options::{ConvertOptions, DRAFT_PREFIX};
use super::output::Output;
use super::tensor;
use crate::plan::{self, Placement};
use crate::policy::Quant;
use crate::{Error, OptionProblem, TensorProblem};
use gpack_format::payload::{self, TensorEntry};
use gpack_format::SectionKind;
use gpack_ingest::Source;
use std::path::{Path, PathBuf};

/// Writes Mtp, when a drafter is asked for or the model has its own
/// blocks. Returns the manifest's description of it (`null` without).
pub(super) fn write(
    out: &mut Output<'_>,
    input: &mut Input,
    opts: &ConvertOptions,
) -> Result<serde_json::Value, Error> {
    let mut desc = serde_json::Value::Null;
    if let Some(dir) = &opts.mtp_dir {
        let (n, size) =
            write_section(out, &open_module(dir)?, "--mtp-dir", dir, opts.quant, false)?;
        out.record(SectionKind::Mtp, size, n);
        desc = serde_json::json!({"path": dir.display().to_string(), "tensors": n});
    }
    if let Some(block) = &mut input.mtp_block {
        // The blocks' tensors stand in for the trunk's while they are written.
        std::mem::swap(&mut input.source.tensors, &mut block.tensors);
        let written = write_section(
            out,
            &input.source,
            "the model's MTP block",
            &opts.source,
            opts.quant,
            true,
        );
        std::mem::swap(&mut input.source.tensors, &mut block.tensors);
        let (n, size) = written?;
        out.record(SectionKind::Mtp, size, n);
        desc = serde_json::json!({
            "role": "mtp",
            "blocks": block.blocks,
            "after_layers": block.trunk,
            "tensors": n,
        });
    }
    if let (Some(d), Some(path)) = (&input.draft, &opts.draft) {
        let (n, size) = write_section(out, d, "--draft", path, opts.quant, false)?;
        out.record(SectionKind::Mtp, size, n);
        desc = serde_json::json!({
            "role": "draft",
            "path": path.display().to_string(),
            "architecture": d.architecture().unwrap_or(""),
            "tensors": n,
            "metadata_prefix": DRAFT_PREFIX,
        });
    }
    Ok(desc)
}

/// Opens a draft module: a directory of safetensors, a GGUF file, or a
/// directory holding exactly one GGUF (or the shards of one).
fn open_module(dir: &Path) -> Result<Source, Error> {
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

/// Writes the Mtp section from `src` (given by `option` `dir`, as errors
/// name it); returns (tensors, payload bytes). Routed experts (a model's own
/// MTP block, `stacked_experts`) are stored as one native matrix per stacked
/// tensor, `rows × n_expert` rows, each expert a whole row range of it.
fn write_section(
    out: &mut Output<'_>,
    src: &Source,
    option: &'static str,
    dir: &Path,
    quant: Quant,
    stacked_experts: bool,
) -> Result<(u64, u64), Error> {
    if src.tensors.is_empty() {
        return Err(OptionProblem::DraftEmpty {
            option,
            path: dir.to_path_buf(),
        }
        .into());
    }
    // llama-quantize's mixes are rules for the main model's tensors: a
    // draft keeps its exact layouts under them.
    let quant = if matches!(quant, Quant::Mix(_)) {
        Quant::Keep
    } else {
        quant
    };
    let mut mtp_plan = plan::plan(src, quant, false, false, false)?;
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
    let progress = out.progress;
    let mut s = out.begin(SectionKind::Mtp, "mtp", pos)?;
    s.write_bytes(&head)?;
    for (p, e) in mtp_plan.tensors.iter().zip(&entries) {
        let t = &src.tensors[p.source];
        s.pad_to(payload::MTP_ALIGN)?;
        debug_assert_eq!(s.len(), data_start + e.offset);
        let bytes = tensor::bytes(src, t)?;
        if e.layout == payload::LAYOUT_GGML {
            s.write_bytes(&bytes)?;
        } else {
            tensor::write_native(&mut s, progress, t, &bytes, p.rows, p, &[])?;
        }
        drop(bytes);
        tensor::release(src, t);
    }
    let size = s.len();
    s.finish(entries.len() as u64)?;
    Ok((entries.len() as u64, size))
}
