//! `load_any`: one entry point for the `gpack tokenize` command and tools.

use crate::error::{Error, Result};
use crate::spec::TokenizerSpec;
use crate::tokenizer::Tokenizer;
use std::path::Path;

/// GBT1 bytes loaded from some source, owning them.
#[derive(Clone, Debug)]
pub struct LoadedTokenizer {
    /// The GBT1 bytes.
    pub gbt1: Vec<u8>,
    /// What they were built from: `"gbt1"`, `"gguf"` or `"tokenizer.json"`.
    pub source: &'static str,
}

impl LoadedTokenizer {
    /// A tokenizer over the owned bytes.
    pub fn tokenizer(&self) -> Result<Tokenizer<'_>> {
        Tokenizer::from_bytes(&self.gbt1)
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Build a tokenizer from any supported file:
/// a GBT1 file, a GGUF file (its `tokenizer.ggml.*` metadata), a `tokenizer.json` (with the
/// `tokenizer_config.json` beside it, if any) or a directory holding a `tokenizer.json`.
/// A `.gpack` container is not opened here: hand its TokenizerBin section to [`Tokenizer::from_bytes`].
pub fn load_any(path: &Path) -> Result<LoadedTokenizer> {
    let (json_path, cfg_path) = if path.is_dir() {
        (
            path.join("tokenizer.json"),
            path.join("tokenizer_config.json"),
        )
    } else {
        let mut head = [0u8; 4];
        {
            use std::io::Read;
            let mut f = std::fs::File::open(path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            let _ = f.read(&mut head);
        }
        if head == crate::gbt1::MAGIC.to_le_bytes() {
            let b = read(path)?;
            crate::gbt1::Gbt1::parse(&b)?;
            return Ok(LoadedTokenizer {
                gbt1: b,
                source: "gbt1",
            });
        }
        if &head == b"GGUF" {
            let src = gpack_ingest::Source::open(path).map_err(|e| Error::Unsupported {
                what: "GGUF file",
                value: format!("{}: {e}", path.display()),
            })?;
            let spec = TokenizerSpec::from_gguf(&src.metadata)?;
            return Ok(LoadedTokenizer {
                gbt1: spec.to_gbt1()?,
                source: "gguf",
            });
        }
        if &head == b"GPCK" {
            return Err(Error::Unsupported {
                what: "container (open it with gpack-format and pass the TokenizerBin section)",
                value: path.display().to_string(),
            });
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        (path.to_path_buf(), dir.join("tokenizer_config.json"))
    };
    let j = read(&json_path)?;
    let cfg = if cfg_path.is_file() {
        Some(read(&cfg_path)?)
    } else {
        None
    };
    let spec = TokenizerSpec::from_hf_json(&j, cfg.as_deref())?;
    Ok(LoadedTokenizer {
        gbt1: spec.to_gbt1()?,
        source: "tokenizer.json",
    })
}
