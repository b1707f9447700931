//! What the caller of [`super::convert`] gives: the options, and the
//! progress callbacks it is told about the write through.

use crate::policy::Quant;
use std::path::PathBuf;

/// What to convert and how.
#[derive(Clone, Debug, Default)]
pub struct ConvertOptions {
    /// A GGUF file (any shard of a split), a safetensors file, an
    /// `index.json` or a Hugging Face directory.
    pub source: PathBuf,
    /// The .gpack to write.
    pub output: PathBuf,
    /// Model name for the manifest (default: `general.name` or the file stem).
    pub name: Option<String>,
    /// Weight layout.
    pub quant: Quant,
    /// With llama-quantize's types (`--quant Q4_K_M`, …): quantize tensors
    /// that are already quantized in the source (llama-quantize's
    /// `--allow-requantize`); without it they are an error.
    pub allow_requantize: bool,
    /// `--imatrix`: an importance matrix (llama-imatrix's GGUF or legacy
    /// `.dat`, or `gpack imatrix`'s) whose per-column weights the
    /// quantizers use, as llama-quantize `--imatrix` does.
    pub imatrix: Option<PathBuf>,
    /// Keep routed experts in the source GGUF shards next to the output.
    pub external_experts: bool,
    /// Replace an existing output.
    pub force: bool,
    /// A draft (multi-token-prediction) module to pack into the Mtp section: a
    /// directory of safetensors files, or a GGUF file / a directory holding one.
    pub mtp_dir: Option<PathBuf>,
    /// A whole draft model for speculative decoding (GGUF or HF directory;
    /// its vocabulary must be the source's): its tensors go to the Mtp
    /// section, its hyperparameters to MetadataKv under [`DRAFT_PREFIX`].
    pub draft: Option<PathBuf>,
}

/// MetadataKv key prefix of a packed draft model's own keys.
pub use gpack_format::payload::DRAFT_KEY_PREFIX as DRAFT_PREFIX;

/// Progress callbacks (called from the converting thread).
pub trait Progress: Sync {
    /// A section of `bytes` bytes starts.
    fn section(&self, _name: &str, _bytes: u64) {}
    /// `bytes` more bytes were written.
    fn advance(&self, _bytes: u64) {}
}

impl Progress for () {}
