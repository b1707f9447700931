//! `gpack ls`: the models pulled into the local store.

use anyhow::Result;
use std::process::ExitCode;

/// List the models in the local store (${GPACK_CACHE:-~/.cache/gpack}).
///
/// One line per reference pulled (by `gpack pull`, or by `gpack run REF` /
/// `gpack serve REF`): the reference, model name, size and file digest,
/// then the store's total size (shared blobs counted once).
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpack ls\n  gpack ls --json")]
pub struct Args {
    /// Print JSON (schema "gpack.ls.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let store = gpack_oci::Store::open_default();
    let refs = store.list()?;
    let blobs = store.root().join("blobs/sha256");
    let blob_bytes: u64 = std::fs::read_dir(&blobs)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    if a.json {
        super::print_json(&serde_json::json!({
            "schema": "gpack.ls.v1",
            "store": store.root(),
            "blob_bytes": blob_bytes,
            "models": refs,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if refs.is_empty() {
        println!("no models in {}", store.root().display());
    }
    for e in &refs {
        println!(
            "{}  {}  {} bytes  {}{}",
            e.reference,
            if e.name.is_empty() { "-" } else { &e.name },
            e.size,
            e.digest,
            if e.kind == "gguf" {
                "  (converted from GGUF)"
            } else {
                ""
            }
        );
    }
    println!("blobs: {blob_bytes} bytes in {}", blobs.display());
    Ok(ExitCode::SUCCESS)
}
