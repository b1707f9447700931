//! `gpack verify`: quick or full integrity check of a .gpack file.

use crate::progress::bytes_bar;
use anyhow::Result;
use gpack_format::{Error, Gpack};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Check a .gpack file's integrity.
///
/// The quick check (--quick) reads only the header, section table, manifest
/// and footer: magics, versions, exact file size, section bounds and
/// alignment, and the manifest's SHA-256 against the footer (about a
/// millisecond, whatever the size). The full check (default) also streams
/// every section through SHA-256, on all cores, and names each section that
/// fails. A .gpack made with --external-experts also has its expert files
/// checked: their sizes (quick) and every slice's SHA-256 (full).
///
/// Exit status: 0 valid, 1 invalid or unreadable, 2 usage error.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpack verify model.gpack\n  gpack verify model.gpack --quick --json"
)]
pub struct Args {
    /// The .gpack file.
    file: PathBuf,
    /// Only the structural check and the manifest digest.
    #[arg(long)]
    quick: bool,
    /// Print a JSON report (schema "gpack.verify.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let mode = if a.quick { "quick" } else { "full" };
    let start = std::time::Instant::now();
    let opened = Gpack::open(&a.file);
    let result: Result<Gpack, Error> = match opened {
        Ok(g) if !a.quick => {
            let total: u64 = g.layout().sections.iter().map(|s| s.size).sum();
            let pb = bytes_bar(total, "verify", !a.json && total > 64 << 20);
            let r = g.verify_full(&|n| pb.inc(n));
            pb.finish_and_clear();
            r.and_then(|()| g.verify_external(true)).map(|()| g)
        }
        Ok(g) => g.verify_external(false).map(|()| g),
        Err(e) => Err(e),
    };
    let elapsed = start.elapsed();
    let file = a.file.display().to_string();
    match result {
        Ok(g) => {
            let size = g.bytes().len() as u64;
            let digest = hex::encode(g.layout().digest());
            if a.json {
                super::print_json(&json!({
                    "schema": "gpack.verify.v1",
                    "file": file,
                    "mode": mode,
                    "ok": true,
                    "size": size,
                    "digest": digest,
                    "seconds": elapsed.as_secs_f64(),
                    "sections": g.layout().sections.iter().map(|s| json!({
                        "kind": s.kind.spec_name(), "name": s.name, "ok": true,
                    })).collect::<Vec<_>>(),
                    "error": null,
                }))?;
            } else {
                println!(
                    "ok: {file} ({mode} check, {} sections, {size} bytes, {:.1} ms)\ndigest: {digest}",
                    g.layout().sections.len(),
                    elapsed.as_secs_f64() * 1e3
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let failed: Vec<_> = match &e {
                Error::DigestMismatch { failed } => failed
                    .iter()
                    .map(|f| {
                        json!({"kind": f.kind.spec_name(), "name": f.name, "ok": false,
                               "offset": f.offset, "expected": f.expected, "found": f.found})
                    })
                    .collect(),
                _ => Vec::new(),
            };
            if a.json {
                super::print_json(&json!({
                    "schema": "gpack.verify.v1",
                    "file": file,
                    "mode": mode,
                    "ok": false,
                    "sections": failed,
                    "error": gpack_format::error_chain(&e),
                }))?;
            } else {
                eprintln!("invalid: {file}: {}", gpack_format::error_chain(&e));
            }
            Ok(ExitCode::from(1))
        }
    }
}
