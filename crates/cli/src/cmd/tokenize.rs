//! `gpack tokenize`: token ids of a text, with any supported model file.

use anyhow::{Context, Result};
use gpack_format::SectionKind;
use gpack_tokenizer::{load_any, Tokenizer};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Print the token ids of TEXT as MODEL's tokenizer encodes it.
///
/// MODEL is a .gpack (its GBT1 TokenizerBin section, mapped), a .gguf, an HF
/// directory or tokenizer.json, or a GBT1 file. Special tokens written in the
/// text (e.g. `<|im_start|>`) are matched before BPE. Output: the ids, space
/// separated (compare with `llama-tokenize --ids`), or with --json each id
/// with its piece.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack tokenize smollm2.gpack \"Hello world\"
  gpack tokenize SmolLM2-135M-Instruct.Q4_1.gguf \"Hello world\" --json
  gpack tokenize ./hf_model_dir --file prompt.txt --no-special")]
pub struct Args {
    /// The model or tokenizer file.
    model: PathBuf,
    /// The text (or use --file).
    text: Option<String>,
    /// Read the text from a file instead.
    #[arg(long, conflicts_with = "text")]
    file: Option<PathBuf>,
    /// Do not add BOS/EOS as the model's rules say.
    #[arg(long)]
    no_special: bool,
    /// Print JSON (schema "gpack.tokenize.v1") with each id's piece.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let text = match (&a.text, &a.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => anyhow::bail!("give the TEXT or --file"),
    };
    let is_gpack = a.model.extension().is_some_and(|e| e == "gpack") || {
        use std::io::Read;
        let mut magic = [0u8; 4];
        std::fs::File::open(&a.model)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
            && &magic == b"GPCK"
    };
    if is_gpack {
        let g = super::open_gpack(&a.model)?;
        let s = g
            .section(SectionKind::TokenizerBin)
            .context("this .gpack has no TokenizerBin section")?;
        let tok = Tokenizer::from_bytes(s.bytes)?;
        print(&tok, &text, &a)
    } else {
        // An I/O error names the file it failed on; any other gets the
        // model's path in front.
        let loaded = load_any(&a.model).map_err(|e| match e {
            e @ gpack_tokenizer::Error::Io { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context(format!("tokenizer of {}", a.model.display())),
        })?;
        let tok = loaded.tokenizer()?;
        print(&tok, &text, &a)
    }
}

fn print(tok: &Tokenizer<'_>, text: &str, a: &Args) -> Result<ExitCode> {
    let ids = tok.encode(text, !a.no_special);
    if a.json {
        super::print_json(&json!({
            "schema": "gpack.tokenize.v1",
            "model": a.model.display().to_string(),
            "n_tokens": ids.len(),
            "tokens": ids.iter().map(|&id| json!({
                "id": id,
                "piece": String::from_utf8_lossy(&tok.token_piece(id)),
            })).collect::<Vec<_>>(),
        }))?;
    } else {
        let s: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", s.join(" "));
    }
    Ok(ExitCode::SUCCESS)
}
