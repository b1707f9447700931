//! Opening any model file: a .gpack (mapped, zero-copy; its TokenizerBin
//! section is the tokenizer), a .gguf / Hugging Face directory (the slow
//! path: weights transcoded at load), or a prequantized .giw bundle (with
//! the tokenizer of the GGUF it was made from, or the metadata GGUF it
//! carries). A .gpack that fails its quick validation falls back to a GGUF
//! when one is given, with a warning naming the validation error (`gpack
//! run`'s `--fallback-gguf`). `gpack run`, `gpack serve` and the Python
//! package all open models through [`Loaded`].

use crate::giw::GiwWeights;
use crate::{GgufWeights, GpackWeights, WeightSource};
use gpack_format::error_chain as chain;
use gpack_format::SectionKind;
use gpack_tokenizer::{load_any, LoadedTokenizer, Tokenizer};
use std::path::{Path, PathBuf};

/// Why a model file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The weights could not be opened.
    #[error("{}", named(("loading model", "loading the model"), path, &**source))]
    Model {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<crate::Error>,
    },
    /// A prequantized .giw bundle could not be opened.
    #[error("{}", named(("loading bundle", "loading the bundle"), path, &**source))]
    Giw {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<crate::giw::GiwError>,
    },
    /// The model's tokenizer could not be read.
    #[error("{}", named(("reading the tokenizer of", "reading the tokenizer"), path, &**source))]
    Tokenizer {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A .gpack without a TokenizerBin section.
    #[error("{path} has no TokenizerBin section")]
    NoTokenizer {
        /// The file.
        path: String,
    },
}

/// `what.0 path`, or `what.1` alone when a cause below names `path`
/// already (a file's open error does): each path is printed once along an
/// error chain, whichever layer knows it.
pub fn named(what: (&str, &str), path: &str, source: &(dyn std::error::Error + 'static)) -> String {
    if gpack_format::error_chain(source).contains(path) {
        what.1.to_string()
    } else {
        format!("{} {path}", what.0)
    }
}

type Result<T> = std::result::Result<T, OpenError>;

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
    pub fn packed_draft(&self) -> Option<crate::Result<crate::DraftWeights<'_>>> {
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
                None => Err(OpenError::Model {
                    path: model.display().to_string(),
                    source: Box::new(e),
                }),
            },
        }
    }

    /// Opens a .giw bundle (of quant `quant`, when given), with the tokenizer
    /// of `tokenizer_source` (the GGUF or HF directory it was built from).
    pub fn open_giw(giw: &Path, quant: Option<&str>, tokenizer_source: &Path) -> Result<Loaded> {
        let weights = giw_weights(giw, quant)?;
        let tokenizer = tokenizer_of(tokenizer_source)?;
        Ok(Loaded::Giw {
            weights,
            tokenizer,
            path: giw.to_path_buf(),
        })
    }

    /// A .giw bundle run directly: the metadata GGUF it carries (the source
    /// truncated at its tensor data) still holds the tokenizer's arrays.
    fn open_giw_alone(giw: &Path) -> Result<Loaded> {
        let weights = giw_weights(giw, None)?;
        let tok_err = |e: Box<dyn std::error::Error + Send + Sync>| OpenError::Tokenizer {
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
        let weights = Box::new(GgufWeights::open(path).map_err(|source| OpenError::Model {
            path: path.display().to_string(),
            source: Box::new(source),
        })?);
        let tokenizer = tokenizer_of(path)?;
        Ok(Loaded::Gguf {
            weights,
            tokenizer,
            path: path.to_path_buf(),
        })
    }

    /// What the KV prefix cache keys blocks of this model by: a .gpack's
    /// footer digest and tokenizer section hash (`None` for a source that
    /// has no digest: a GGUF, a Hugging Face directory, a .giw bundle).
    pub fn identity(&self) -> Option<crate::kvcache::ModelIdentity> {
        match self {
            Loaded::Gpack { weights, .. } => {
                let g = weights.gpack();
                let tok = g.layout().section(SectionKind::TokenizerBin)?;
                Some(crate::kvcache::ModelIdentity {
                    model: g.layout().digest(),
                    tokenizer: tok.sha256,
                })
            }
            _ => None,
        }
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
                    .ok_or_else(|| OpenError::NoTokenizer { path: path() })?;
                Tokenizer::from_bytes(s.bytes).map_err(|source| OpenError::Tokenizer {
                    path: path(),
                    source: Box::new(source),
                })
            }
            Loaded::Gguf { tokenizer, .. } | Loaded::Giw { tokenizer, .. } => tokenizer
                .tokenizer()
                .map_err(|source| OpenError::Tokenizer {
                    path: path(),
                    source: Box::new(source),
                }),
        }
    }
}

/// A .giw bundle's weights (of quant `quant`, when given).
fn giw_weights(giw: &Path, quant: Option<&str>) -> Result<Box<GiwWeights>> {
    GiwWeights::open(giw, quant)
        .map(Box::new)
        .map_err(|source| OpenError::Giw {
            path: giw.display().to_string(),
            source: Box::new(source),
        })
}

/// The tokenizer of a GGUF file or Hugging Face directory.
fn tokenizer_of(path: &Path) -> Result<LoadedTokenizer> {
    load_any(path).map_err(|source| OpenError::Tokenizer {
        path: path.display().to_string(),
        source: Box::new(source),
    })
}
