//! The end of the file: section 14 Manifest (the model's name and
//! architecture, the source, how it was converted) and the footer, written by
//! [`gpack_format::GpackWriter::finish`], which verifies the file and renames
//! it into place; then the conversion's [`Report`].

use super::input::Input;
use super::options::ConvertOptions;
use super::output::Output;
use super::report::{self, Report};
use crate::Error;
use gpack_format::ManifestInput;
use gpack_ingest::SourceKind;

/// Writes the manifest and the footer, and reports the conversion that
/// started at `start`; `mtp` is the Mtp section's description
/// ([`super::mtp::write`]).
pub(super) fn finish(
    out: Output<'_>,
    input: &Input,
    opts: &ConvertOptions,
    mtp: serde_json::Value,
    start: std::time::Instant,
) -> Result<Report, Error> {
    let source = &input.source;
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
    let stored_as_ggml = report::stored_as_ggml_blocks(input);
    // The file name only: the manifest is hashed and shared, a path is not
    // the model's.
    let imatrix = input.imatrix.as_ref().map(|im| {
        im.file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    });
    let written = out.w.finish(&ManifestInput {
        name,
        architecture: source.architecture().unwrap_or("").to_string(),
        source: source_desc.clone(),
        extra: [(
            "convert".to_string(),
            serde_json::json!({
                "quant": opts.quant.name(),
                "external_experts": opts.external_experts,
                "tensors": input.plan.tensors.len(),
                "stored_as_ggml_blocks": stored_as_ggml.len(),
                "mtp": mtp,
                "imatrix": imatrix,
            }),
        )]
        .into(),
    })?;
    let tensors = report::tensors(input, opts.external_experts);
    let (bits_per_weight, weights_bits_per_weight) =
        report::bits_per_weight(written.size, &tensors);
    Ok(Report {
        schema: "gpack.convert.v1",
        output: written.path.display().to_string(),
        size: written.size,
        digest: hex::encode(written.digest),
        source: source_desc,
        quant: opts.quant.name(),
        external_experts: opts.external_experts,
        sections: out.sections,
        tensors,
        stored_as_ggml_blocks: stored_as_ggml,
        seconds: start.elapsed().as_secs_f64(),
        imatrix,
        bits_per_weight,
        weights_bits_per_weight,
    })
}
