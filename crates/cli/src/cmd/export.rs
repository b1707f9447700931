//! `gpack export`: a .gpack back to GGUF.

use crate::progress::bytes_bar;
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write a .gpack's tensors and metadata back to a GGUF file.
///
/// The metadata is every key of the source, in its order, with its GGUF
/// value bytes (the .gpack keeps them in its MetadataKv section). Tensors
/// stored exactly are written in their ggml type, byte for byte: a .gpack
/// converted with --quant keep gives back every source tensor bit for bit
/// (in name order), and llama.cpp loads the result. Tensors whose layout
/// has no ggml type (the int8/int4 transcodes of --quant int8|int4) are
/// written as F32 values, the ones gpack computes from them. MoE models
/// (stacked routed experts) are not exported yet. The GGUF is written
/// through a temporary file and renamed into place; an existing OUTPUT is
/// replaced only with --force.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    gpack export smollm2.gpack -o smollm2.gguf\n  \
    gpack export m.gpack -o m.gguf --force --json")]
pub struct Args {
    /// The .gpack file.
    file: PathBuf,
    /// The GGUF to write.
    #[arg(short, long, value_name = "OUT.gguf")]
    output: PathBuf,
    /// Replace an existing output.
    #[arg(long)]
    force: bool,
    /// Print a JSON report (schema "gpack.export.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let total = std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    let pb = bytes_bar(total, "export", !a.json && total > 64 << 20);
    let rep =
        gpack_runtime::export::export(&a.file, &a.output, a.force, &|n| pb.inc(n)).map_err(|e| {
            let ctx = gpack_format::job_context("exporting", &a.file, &a.output, &e);
            anyhow::Error::new(e).context(ctx)
        });
    pb.finish_and_clear();
    let rep = rep?;
    if a.json {
        super::print_json(&serde_json::to_value(&rep)?)?;
    } else {
        println!(
            "wrote {} ({} bytes, {} tensors, {} metadata keys{}) in {:.2} s",
            rep.output.display(),
            rep.size,
            rep.tensors,
            rep.metadata_keys,
            if rep.dequantized.is_empty() {
                String::new()
            } else {
                format!(", {} written as F32", rep.dequantized.len())
            },
            rep.seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}
