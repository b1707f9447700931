//! `gpack inspect`: what is inside a .gpack file.

use anyhow::Result;
use gpack_format::ggml::GgmlType;
use gpack_format::{Gpack, HeaderFlags, SectionKind};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Show a .gpack file's header, flags, sections and manifest.
///
/// Runs the quick check first (an invalid file is reported, exit 1); it does
/// not hash the payloads: use `gpack verify` for that.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpack inspect model.gpack\n  gpack inspect model.gpack --json | jq .sections\n  gpack inspect model.gpack --devices   # and the GPUs it could run on"
)]
pub struct Args {
    /// The .gpack file (or a KV cache file: a `--kv-cache-dir` block or a
    /// `--prompt-cache` file).
    file: PathBuf,
    /// Print JSON (schema "gpack.inspect.v1"; "family" holds the runtime's
    /// view: {"architecture", "features"} or {"error"}; each tensor's
    /// "type" is its source type, "stored_type" the type it is stored as;
    /// the mix is manifest.convert.quant) instead of text.
    #[arg(long)]
    json: bool,
    /// Also list the GPU adapters the installed drivers offer (index, name,
    /// backend, hardware or software) and what `--device auto` takes; JSON:
    /// "devices". Loads the GPU drivers, so it is not done by default.
    #[arg(long)]
    devices: bool,
}

/// The model family the runtime sees in `file` and the features of it in
/// use, or why it cannot run it.
fn family(file: &std::path::Path) -> serde_json::Value {
    let config = gpack_runtime::GpackWeights::open(file)
        .and_then(|w| gpack_runtime::Model::load(&w).map(|m| m.config.clone()));
    match config {
        Ok(c) => json!({"architecture": c.arch.name(), "features": c.features()}),
        Err(e) => json!({"error": gpack_format::error_chain(&e)}),
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let mut magic = [0u8; 8];
    if std::fs::File::open(&a.file)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && &magic == gpack_runtime::kvcache::file::MAGIC
    {
        return super::cache::inspect(&a.file, a.json);
    }
    let g = super::open_gpack(&a.file)?;
    let fam = family(&a.file);
    let l = g.layout();
    let h = &l.header;
    let flags = HeaderFlags(h.flags.get());
    let m = g.manifest();
    if a.json {
        super::print_json(&json!({
            "schema": "gpack.inspect.v1",
            "file": a.file.display().to_string(),
            "size": g.bytes().len(),
            "digest": hex::encode(l.digest()),
            "header": {
                "format_version": h.format_version.get(),
                "min_reader_version": h.min_reader_version.get(),
                "flags": flags.0,
                "flag_names": flags.names(),
                "section_count": h.section_count.get(),
                "section_table_offset": h.section_table_offset.get(),
                "manifest_offset": h.manifest_offset.get(),
                "manifest_size": h.manifest_size.get(),
                "total_file_size": h.total_file_size.get(),
            },
            "sections": l.sections.iter().map(|s| json!({
                "kind": s.kind as u32,
                "kind_name": s.kind.spec_name(),
                "name": s.name,
                "offset": s.offset,
                "size": s.size,
                "alignment": s.alignment,
                "item_count": s.item_count,
                "sha256": hex::encode(s.sha256),
            })).collect::<Vec<_>>(),
            "manifest": m.to_value(),
            "family": fam,
            "tensors": tensors(&g)?,
            "devices": a.devices.then(super::devices::json),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "file:      {}", a.file.display())?;
    writeln!(out, "size:      {} bytes", g.bytes().len())?;
    writeln!(out, "digest:    {}", hex::encode(l.digest()))?;
    writeln!(
        out,
        "format:    GPACK v{} (needs reader v{})",
        h.format_version.get(),
        h.min_reader_version.get()
    )?;
    writeln!(
        out,
        "flags:     {:#06x} {}",
        flags.0,
        flags.names().join(" | ")
    )?;
    writeln!(
        out,
        "model:     {} ({})",
        m.name,
        if m.architecture.is_empty() {
            "-"
        } else {
            &m.architecture
        }
    )?;
    match fam["features"].as_array() {
        Some(fs) => {
            writeln!(
                out,
                "family:    {}",
                fam["architecture"].as_str().unwrap_or("?")
            )?;
            for f in fs {
                writeln!(out, "           {}", f.as_str().unwrap_or(""))?;
            }
        }
        None => writeln!(
            out,
            "family:    not runnable here: {}",
            fam["error"].as_str().unwrap_or("?")
        )?,
    }
    writeln!(out, "source:    {}", m.source)?;
    let devices = match a.devices {
        true => super::devices::lines(&super::devices::json()),
        false => Vec::new(),
    };
    for (i, d) in devices.iter().enumerate() {
        writeln!(
            out,
            "{}{d}",
            if i == 0 { "devices:   " } else { "           " }
        )?;
    }
    let mv = m.to_value();
    if let Some(q) = mv["convert"]["quant"].as_str() {
        let im = mv["convert"]["imatrix"]
            .as_str()
            .map(|f| format!(", importance matrix {f}"))
            .unwrap_or_default();
        writeln!(out, "quant:     {q}{}{im}", mix_note(q))?;
    }
    let mtp = &mv["convert"]["mtp"];
    if mtp["role"] == "mtp" {
        writeln!(
            out,
            "mtp:       {} multi-token-prediction block(s) after layer {}, {} tensors in the mtp section (gpack run/serve --spec mtp)",
            mtp["blocks"], mtp["after_layers"], mtp["tensors"]
        )?;
    }
    if mtp["role"] == "draft" {
        writeln!(
            out,
            "draft:     {} model, {} tensors in the mtp section (speculative decoding: gpack run/serve draft with it by default)",
            mtp["architecture"].as_str().unwrap_or("?"),
            mtp["tensors"]
        )?;
    }
    writeln!(out, "sections:")?;
    writeln!(
        out,
        "  {:>2}  {:<20} {:<20} {:>12} {:>14} {:>5} {:>9}  sha256",
        "#", "kind", "name", "offset", "size", "align", "items"
    )?;
    for s in &l.sections {
        writeln!(
            out,
            "  {:>2}  {:<20} {:<20} {:>12} {:>14} {:>5} {:>9}  {}",
            s.kind as u32,
            s.kind.spec_name(),
            s.name,
            s.offset,
            s.size,
            s.alignment,
            s.item_count,
            &hex::encode(s.sha256)[..16]
        )?;
    }
    let t = tensors(&g)?;
    if !t.is_empty() {
        writeln!(out, "tensors:   {}", t.len())?;
        writeln!(
            out,
            "  {:<40} {:<6} {:<7} {:<18} {:<14} layout",
            "name", "source", "stored", "dims", "section"
        )?;
        for e in &t {
            writeln!(
                out,
                "  {:<40} {:<6} {:<7} {:<18} {:<14} {}",
                e["name"].as_str().unwrap_or(""),
                e["type"].as_str().unwrap_or(""),
                e["stored_type"].as_str().unwrap_or(""),
                e["dims"].to_string(),
                e["section"].as_str().unwrap_or(""),
                e["layout"].as_str().unwrap_or("")
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The TensorIndex as JSON rows (empty when the file has none).
fn tensors(g: &Gpack) -> Result<Vec<serde_json::Value>> {
    let Some(s) = g.section(SectionKind::TensorIndex) else {
        return Ok(Vec::new());
    };
    let entries = gpack_format::payload::parse_tensor_index(s.bytes)?;
    Ok(entries
        .iter()
        .map(|e| {
            let ty = GgmlType::from_id(e.src_type)
                .map_or_else(|| format!("#{}", e.src_type), |t| t.name().to_string());
            json!({
                "name": e.name,
                "type": ty,
                "stored_type": stored_type(e.layout, e.group, &ty),
                "dims": e.dims,
                "section": SectionKind::from_u32(e.section).map_or("?", |k| k.default_name()),
                "layout": layout_name(e.layout, e.group),
                "offset": e.offset,
                "size": e.size,
            })
        })
        .collect())
}

/// `(mix)` after the quant name when it is one of llama-quantize's mixes
/// (Q4_K_M: each tensor's own type below), nothing for gpack's own.
fn mix_note(quant: &str) -> &'static str {
    match quant.parse::<gpack_convert::Quant>() {
        Ok(gpack_convert::Quant::Mix(_)) => " (llama-quantize mix: each tensor's type below)",
        _ => "",
    }
}

/// The type a tensor is stored as: the ggml type of its blocks (Q4_K for
/// a `Q4_Kx16` layout, the source type for raw ggml rows), F32/F16/BF16,
/// or gpack's own layout's name (`I8Sym/G32`).
fn stored_type(code: u32, group: u32, source: &str) -> String {
    use gpack_quant::Layout as L;
    if code == gpack_format::payload::LAYOUT_GGML {
        return source.to_string();
    }
    match gpack_quant::Layout::from_code(code, group) {
        Ok(L::Rows16(t) | L::Ggml(t)) => t.name().to_string(),
        Ok(L::F32) => "F32".into(),
        Ok(L::F16) => "F16".into(),
        Ok(L::BF16) => "BF16".into(),
        Ok(l) => l.name().to_string(),
        Err(_) => format!("#{code}"),
    }
}

/// The native layout's name as `gpack_quant` spells it (`Q4_Kx16` for the
/// row-interleaved ones), `raw` for plain ggml blocks, `#code` for a code
/// this build does not know.
fn layout_name(code: u32, group: u32) -> String {
    if code == gpack_format::payload::LAYOUT_GGML {
        return "raw".into();
    }
    gpack_quant::Layout::from_code(code, group)
        .map_or_else(|_| format!("#{code}"), |l| l.name().to_string())
}
