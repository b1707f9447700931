//! `gpack rm`: forget a pulled model and free what no other model uses.

use anyhow::Result;
use std::process::ExitCode;

/// Remove models from the local store.
///
/// Forgets each REF, deletes its assembled .gpack and every blob (section,
/// config) that no other stored model uses. Files written with
/// `gpack pull -o` are not touched.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  gpack rm registry.example.com/models/smollm2:q4_1")]
pub struct Args {
    /// References to remove, as `gpack ls` prints them.
    #[arg(required = true)]
    references: Vec<String>,
    /// Print JSON (schema "gpack.rm.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let store = gpack_oci::Store::open_default();
    let mut removed = Vec::new();
    for s in &a.references {
        let r = gpack_oci::reference::parse(s)?;
        let freed = store.remove(&r, s)?;
        if !a.json {
            println!("removed {s} ({freed} bytes freed)");
        }
        removed.push(serde_json::json!({"reference": s, "freed": freed}));
    }
    if a.json {
        super::print_json(&serde_json::json!({"schema": "gpack.rm.v1", "removed": removed}))?;
    }
    Ok(ExitCode::SUCCESS)
}
