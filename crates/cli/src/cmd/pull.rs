//! `gpack pull`: a .gpack (or a Docker GGUF model) from a registry.

use super::RegistryArgs;
use crate::progress::TransferBars;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Pull a .gpack from an OCI registry.
///
/// A ModelPack artifact (one layer holding the whole .gpack, what `gpack
/// push` writes by default) is fetched with parallel HTTP Range requests
/// (--jobs at a time, --range-size each) into one preallocated file next to
/// OUTPUT; each section is checked against the file's section table as
/// soon as its bytes are in (a damaged one stops the pull and is named),
/// and before the file is renamed into place its whole SHA-256 must equal
/// the layer digest. An interrupted pull keeps that file and a journal of
/// the ranges written; the next pull asks only for the rest. Refused before
/// anything is written: more than one weight layer, a file path annotation
/// that is not one plain file name, a size that disagrees with the layer
/// descriptor. A per-section artifact (--per-section pushes) has its layers
/// downloaded several at once into the local blob store
/// (${GPACK_CACHE:-~/.cache/gpack}/blobs/sha256/), each checked against its
/// digest while it streams, and is then assembled like convert writes its
/// output. Either way a failed pull leaves no file at OUTPUT, and an
/// existing OUTPUT is never replaced without --force. A Docker or ModelPack
/// GGUF model artifact (one GGUF layer) is converted on arrival. Without -o
/// the model stays in the store, where `gpack run REF` finds it.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    gpack pull registry.example.com/models/smollm2:q4_1 -o smollm2.gpack\n  \
    gpack pull registry.example.com/models/smollm2@sha256:… -o m.gpack --json\n  \
    gpack pull registry.example.com/ai/smollm2:latest -o s.gpack   # a Docker GGUF model, converted")]
pub struct Args {
    /// What: host[:port]/repository[:tag|@sha256:DIGEST].
    reference: String,
    /// The .gpack to write (default: only the store's copy).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Replace an existing output.
    #[arg(long)]
    force: bool,
    /// Layers downloaded at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    jobs: usize,
    /// Bytes per Range request of a single-layer pull (K, M, G suffixes).
    #[arg(long, default_value = "16M", value_name = "SIZE", value_parser = parse_rate)]
    range_size: u64,
    /// Cap the download rate, bytes per second (K, M, G suffixes).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    limit_rate: Option<u64>,
    /// --quant of the conversion when the artifact is a GGUF.
    #[arg(long, default_value = "keep", value_parser = super::quant_parser())]
    quant: gpack_convert::Quant,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print a JSON report (schema "gpack.pull.v1") instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_rate(s: &str) -> Result<u64, String> {
    gpack_runtime::experts::parse_size(s)
        .filter(|&n| n > 0)
        .map(|n| n as u64)
        .ok_or_else(|| {
            format!("{s:?} is not a rate (a positive number with an optional K, M or G suffix)")
        })
}

pub fn run(a: Args) -> Result<ExitCode> {
    let r = gpack_oci::reference::parse(&a.reference)?;
    if let Some(o) = &a.output {
        if o.exists() && !a.force {
            anyhow::bail!(
                "{} already exists (pass --force to replace it)",
                o.display()
            );
        }
    }
    let reg = gpack_oci::Registry::connect(
        &r,
        &a.registry.options(),
        gpack_oci::RegistryOperation::Pull,
    )?;
    let store = gpack_oci::Store::open_default();
    let bars = Arc::new(TransferBars::new("pull", !a.json));
    let opts = gpack_oci::PullOptions {
        output: a.output.clone(),
        force: a.force,
        jobs: a.jobs,
        limit_rate: a.limit_rate,
        convert: Some(super::convert_gguf(a.quant)),
        range_size: a.range_size,
    };
    let rep = gpack_oci::pull(&reg, &store, &r, &opts, bars.clone())
        .with_context(|| format!("pulling {}", a.reference));
    bars.finish();
    let rep = rep?;
    if a.json {
        let mut v = serde_json::to_value(&rep)?;
        v["schema"] = "gpack.pull.v1".into();
        super::print_json(&v)?;
    } else {
        let count = |s: &str| rep.layers.iter().filter(|l| l.status == s).count();
        println!(
            "pulled {} -> {} ({} bytes; {} layers: {} downloaded, {} resumed, {} from the store; {} bytes fetched{}) in {:.2} s\ndigest: {}",
            rep.reference,
            rep.output.display(),
            rep.size,
            rep.layers.len(),
            count("downloaded"),
            count("resumed"),
            count("cached"),
            rep.downloaded,
            if rep.kind == "gguf" { ", GGUF converted" } else { "" },
            rep.seconds,
            rep.digest
        );
    }
    Ok(ExitCode::SUCCESS)
}
