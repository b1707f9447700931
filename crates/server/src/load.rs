//! Opening a model file: a .gpack (mapped, zero-copy; its TokenizerBin
//! section is the tokenizer), or a .gguf / Hugging Face directory (the slow
//! path: weights transcoded at load). A .gpack that fails its quick
//! validation falls back to a GGUF when one is given, with a warning naming
//! the validation error (`gpack run`'s `--fallback-gguf` behaviour). A
//! prequantized .giw bundle (e.g. the `--stream-weights` sidecar the cli
//! builds) is served with the tokenizer of the GGUF it was made from. A
//! MODEL that names no file but is a registry reference is pulled into the
//! local store first ([`resolve_model`]).

use crate::error::{Error, Result};
use gpack_format::SectionKind;
use gpack_runtime::giw::GiwWeights;
use gpack_runtime::{GgufWeights, GpackWeights, WeightSource};
use gpack_tokenizer::{load_any, LoadedTokenizer, Tokenizer};
use std::path::{Path, PathBuf};

/// A model's weights and tokenizer bytes, owned.
pub enum Loaded {
    /// A mapped .gpack.
    Gpack {
        /// The weights.
        weights: Box<GpackWeights>,
        /// The file.
        path: PathBuf,
    },
    /// A GGUF file or Hugging Face directory, transcoded at load.
    Gguf {
        /// The weights.
        weights: Box<GgufWeights>,
        /// The tokenizer built from the same source.
        tokenizer: LoadedTokenizer,
        /// The file or directory.
        path: PathBuf,
    },
    /// A prequantized .giw bundle.
    Giw {
        /// The weights.
        weights: Box<GiwWeights>,
        /// The tokenizer (from the source GGUF).
        tokenizer: LoadedTokenizer,
        /// The bundle.
        path: PathBuf,
    },
}

/// The file to open for a MODEL argument: `model` itself when it exists
/// (a file or directory wins over a same-named reference), else, when it
/// parses as a registry reference (`host[:port]/repo[:tag|@digest]`), the
/// .gpack pulled into the local store (once: a reference already pulled is
/// opened from the store without asking the registry).
#[cfg(feature = "registry")]
pub fn resolve_model(
    model: &Path,
    registry: &gpack_oci::Options,
    progress: std::sync::Arc<dyn gpack_oci::Progress>,
) -> Result<PathBuf> {
    let s = model.to_string_lossy();
    if model.exists() || !gpack_oci::reference::looks_like_reference(&s) {
        return Ok(model.to_path_buf());
    }
    gpack_oci::resolve(&s, registry, progress).map_err(|e| Error::Pull {
        reference: s.to_string(),
        source: Box::new(e),
    })
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path())
            .finish()
    }
}

impl Loaded {
    /// The draft model packed in a .gpack's Mtp section (`gpack convert
    /// --draft`), if this is such a file.
    pub fn packed_draft(&self) -> Option<gpack_runtime::Result<gpack_runtime::DraftWeights<'_>>> {
        match self {
            Loaded::Gpack { weights, .. } => weights.draft(),
            _ => None,
        }
    }

    /// Opens `model`: a .gpack (`fallback` is used when it fails
    /// validation), a .giw bundle (its tokenizer from the metadata GGUF it
    /// carries), or a .gguf / Hugging Face directory.
    pub fn open(model: &Path, fallback: Option<&Path>) -> Result<Loaded> {
        if model.extension().is_some_and(|e| e == "giw") {
            return Self::open_giw_alone(model);
        }
        let is_gpack = model.extension().is_some_and(|e| e == "gpack");
        if !is_gpack {
            return Self::open_slow(model);
        }
        match GpackWeights::open(model) {
            Ok(weights) => Ok(Loaded::Gpack {
                weights: Box::new(weights),
                path: model.to_path_buf(),
            }),
            Err(e) => match fallback {
                Some(g) => {
                    log::warn!(
                        "{} failed validation ({}); falling back to {}",
                        model.display(),
                        chain(&e),
                        g.display()
                    );
                    Self::open_slow(g)
                }
                None => Err(Error::Model {
                    path: model.display().to_string(),
                    source: Box::new(e),
                }),
            },
        }
    }

    /// Opens a .giw bundle (of quant `quant`, when given), with the tokenizer
    /// of `tokenizer_source` (the GGUF or HF directory it was built from).
    pub fn open_giw(giw: &Path, quant: Option<&str>, tokenizer_source: &Path) -> Result<Loaded> {
        let weights = Box::new(GiwWeights::open(giw, quant).map_err(|source| Error::Giw {
            path: giw.display().to_string(),
            source: Box::new(source),
        })?);
        let tokenizer = load_any(tokenizer_source).map_err(|source| Error::Tokenizer {
            path: tokenizer_source.display().to_string(),
            source: Box::new(source),
        })?;
        Ok(Loaded::Giw {
            weights,
            tokenizer,
            path: giw.to_path_buf(),
        })
    }

    /// A .giw bundle run directly: the metadata GGUF it carries (the source
    /// truncated at its tensor data) still holds the tokenizer's arrays.
    fn open_giw_alone(giw: &Path) -> Result<Loaded> {
        let weights = Box::new(GiwWeights::open(giw, None).map_err(|source| Error::Giw {
            path: giw.display().to_string(),
            source: Box::new(source),
        })?);
        let tok_err = |e: Box<dyn std::error::Error + Send + Sync>| Error::Tokenizer {
            path: giw.display().to_string(),
            source: e,
        };
        let (_, meta) = gpack_ingest::gguf::parse_metadata(weights.giw().metadata(), giw)
            .map_err(|e| tok_err(Box::new(e)))?;
        let spec =
            gpack_tokenizer::TokenizerSpec::from_gguf(&meta).map_err(|e| tok_err(Box::new(e)))?;
        let tokenizer = LoadedTokenizer {
            gbt1: spec.to_gbt1().map_err(|e| tok_err(Box::new(e)))?,
            source: "gguf",
        };
        Ok(Loaded::Giw {
            weights,
            tokenizer,
            path: giw.to_path_buf(),
        })
    }

    fn open_slow(path: &Path) -> Result<Loaded> {
        let weights = Box::new(GgufWeights::open(path).map_err(|source| Error::Model {
            path: path.display().to_string(),
            source: Box::new(source),
        })?);
        let tokenizer = load_any(path).map_err(|source| Error::Tokenizer {
            path: path.display().to_string(),
            source: Box::new(source),
        })?;
        Ok(Loaded::Gguf {
            weights,
            tokenizer,
            path: path.to_path_buf(),
        })
    }

    /// The file actually loaded (the fallback, when it was used).
    pub fn path(&self) -> &Path {
        match self {
            Loaded::Gpack { path, .. } | Loaded::Gguf { path, .. } | Loaded::Giw { path, .. } => {
                path
            }
        }
    }

    /// The weight store.
    pub fn weights(&self) -> &dyn WeightSource {
        match self {
            Loaded::Gpack { weights, .. } => weights.as_ref(),
            Loaded::Gguf { weights, .. } => weights.as_ref(),
            Loaded::Giw { weights, .. } => weights.as_ref(),
        }
    }

    /// The tokenizer (a view; nothing is parsed from text).
    pub fn tokenizer(&self) -> Result<Tokenizer<'_>> {
        let path = || self.path().display().to_string();
        match self {
            Loaded::Gpack { weights, .. } => {
                let s = weights
                    .gpack()
                    .section(SectionKind::TokenizerBin)
                    .ok_or_else(|| Error::NoTokenizer { path: path() })?;
                Tokenizer::from_bytes(s.bytes).map_err(|source| Error::Tokenizer {
                    path: path(),
                    source: Box::new(source),
                })
            }
            Loaded::Gguf { tokenizer, .. } | Loaded::Giw { tokenizer, .. } => {
                tokenizer.tokenizer().map_err(|source| Error::Tokenizer {
                    path: path(),
                    source: Box::new(source),
                })
            }
        }
    }
}

pub(crate) use gpack_format::error_chain as chain;
