//! `gpack cache ls|clear DIR`: the KV block files of a cache directory
//! (`serve --kv-cache-dir`, `run --kv-cache-dir`).

use anyhow::{Context, Result};
use gpack_runtime::kvcache::{dir, file};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// List or clear a KV cache directory.
///
/// A cache directory holds one file per block of 64 positions of a
/// prompt's keys and values (`<key>.gkv`, docs/FORMAT.md "KV cache
/// files"): written by `gpack serve --kv-cache-dir` and `gpack run
/// --kv-cache-dir`, read back by any later or concurrent process serving
/// the same .gpack with the same settings.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpack cache ls ~/.cache/gpack/kv\n  gpack cache ls ~/.cache/gpack/kv --json | jq .total_bytes\n  gpack cache clear ~/.cache/gpack/kv\n  gpack inspect ~/.cache/gpack/kv/<key>.gkv   # one block file"
)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List the block files: the model digest and settings they belong
    /// to, positions, size and last use, least recently used first (the
    /// order eviction removes them in).
    Ls {
        /// The cache directory.
        dir: PathBuf,
        /// Print JSON (schema "gpack.cache.ls.v1").
        #[arg(long)]
        json: bool,
    },
    /// Remove every block file (and temporary files of writers that are
    /// gone); other files are left alone.
    Clear {
        /// The cache directory.
        dir: PathBuf,
    },
}

fn age(t: std::time::SystemTime) -> u64 {
    t.elapsed().map_or(0, |d| d.as_secs())
}

/// One block file's description (its header; payloads are not hashed).
fn describe(path: &Path) -> serde_json::Value {
    let head = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| file::parse(&b).map_err(|e| e.to_string()));
    match head {
        Ok(p) => json!({
            "first_block": p.header.first_block,
            "blocks": p.header.n_blocks,
            "positions": [p.header.first_block * gpack_runtime::KB,
                          (p.header.first_block + p.header.n_blocks) * gpack_runtime::KB],
            "model_digest": hex::encode(p.header.model),
            "kv": [p.header.kv.0, p.header.kv.1],
            "isa": p.header.isa,
        }),
        Err(e) => json!({"error": e}),
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    match a.action {
        Action::Ls {
            dir: d,
            json: as_json,
        } => {
            std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
            let files = dir::list(&d);
            let total: u64 = files.iter().map(|f| f.bytes).sum();
            let rows: Vec<serde_json::Value> = files
                .iter()
                .map(|f| {
                    let mut v = describe(&f.path);
                    v["file"] = json!(f.path.file_name().map(|n| n.to_string_lossy()));
                    v["bytes"] = json!(f.bytes);
                    v["last_used_secs_ago"] = json!(age(f.used));
                    v
                })
                .collect();
            if as_json {
                super::print_json(&json!({
                    "schema": "gpack.cache.ls.v1",
                    "dir": d.display().to_string(),
                    "files": rows.len(),
                    "total_bytes": total,
                    "blocks": rows,
                }))?;
            } else {
                println!(
                    "{}: {} block files, {:.1} MiB",
                    d.display(),
                    rows.len(),
                    total as f64 / (1 << 20) as f64
                );
                for r in &rows {
                    match r.get("error") {
                        Some(e) => println!("  {}  unreadable: {e}", r["file"].as_str().unwrap_or("")),
                        None => println!(
                            "  {}  positions {}..{}  KV {}/{}  {}  model {}…  {:.1} MiB  used {} s ago",
                            &r["file"].as_str().unwrap_or("")[..16.min(r["file"].as_str().unwrap_or("").len())],
                            r["positions"][0],
                            r["positions"][1],
                            r["kv"][0].as_str().unwrap_or(""),
                            r["kv"][1].as_str().unwrap_or(""),
                            r["isa"].as_str().unwrap_or(""),
                            &r["model_digest"].as_str().unwrap_or("")[..12],
                            r["bytes"].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64,
                            r["last_used_secs_ago"],
                        ),
                    }
                }
            }
        }
        Action::Clear { dir: d } => {
            std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
            let (n, bytes) = dir::clear(&d).with_context(|| format!("clearing {}", d.display()))?;
            println!(
                "{}: removed {n} files ({:.1} MiB)",
                d.display(),
                bytes as f64 / (1 << 20) as f64
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `gpack inspect` of a KV cache file (block file or `--prompt-cache`
/// file): its header and blocks, checked structurally.
pub fn inspect(path: &Path, as_json: bool) -> Result<ExitCode> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let p = file::parse(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a valid KV cache file: {e}", path.display()))?;
    let h = &p.header;
    let v = json!({
        "schema": "gpack.inspect.kvcache.v1",
        "file": path.display().to_string(),
        "size": bytes.len(),
        "version": file::VERSION,
        "positions_per_block": gpack_runtime::KB,
        "block_bytes": h.block_bytes,
        "first_block": h.first_block,
        "blocks": p.entries.iter().enumerate().map(|(i, e)| json!({
            "index": h.first_block + i,
            "key": hex::encode(e.key),
            "sha256": hex::encode(e.sha256),
            "first_tokens": e.tokens[..8].to_vec(),
        })).collect::<Vec<_>>(),
        "context_digest": hex::encode(h.context),
        "model_digest": hex::encode(h.model),
        "tokenizer_digest": hex::encode(h.tokenizer),
        "parent": hex::encode(h.parent),
        "kv": {"k": h.kv.0, "v": h.kv.1},
        "isa": h.isa,
    });
    if as_json {
        super::print_json(&v)?;
    } else {
        println!("{}: gpack KV cache file v{}", path.display(), file::VERSION);
        println!(
            "  blocks {}..{} (positions {}..{}), {} bytes each",
            h.first_block,
            h.first_block + h.n_blocks,
            h.first_block * gpack_runtime::KB,
            (h.first_block + h.n_blocks) * gpack_runtime::KB,
            h.block_bytes
        );
        println!("  model digest     {}", hex::encode(h.model));
        println!("  tokenizer digest {}", hex::encode(h.tokenizer));
        println!("  context digest   {}", hex::encode(h.context));
        println!("  KV {} / {}, computed on {}", h.kv.0, h.kv.1, h.isa);
        for (i, e) in p.entries.iter().enumerate() {
            println!(
                "  block {:>5}  key {}…  sha256 {}…",
                h.first_block + i,
                &hex::encode(e.key)[..16],
                &hex::encode(e.sha256)[..16]
            );
        }
        println!("  (payload hashes are checked when a model uses the blocks)");
    }
    Ok(ExitCode::SUCCESS)
}
