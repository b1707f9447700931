//! gpack-ingest: reads foreign model formats into one [`Source`].
//!
//! A [`Source`] is metadata (GGUF keys and values), tensor descriptors pointing into
//! memory-mapped files, and raw tokenizer/config assets, whatever it was read from:
//! - [`gguf`]: GGUF v2/v3 files and split GGUFs (all shards found and checked);
//! - [`safetensors`]: one file, or the shards of a `*.index.json`;
//! - [`hf`]: Hugging Face directories, whose config and tensor names are mapped to
//!   GGUF's so that everything downstream only deals with GGUF conventions.
//!
//! Every parser here reads untrusted bytes: it validates once at open, bounds every
//! count and length by the bytes that remain before allocating, uses checked size
//! arithmetic, and never panics. Files are mapped by `gpack_format::mmap`, the one place
//! with `unsafe` outside the kernels.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
pub mod gguf;
pub mod hf;
pub mod imatrix;
pub mod safetensors;
mod source;
mod value;

pub use error::{
    ConfigProblem, Error, IndexProblem, ShapeProblem, TensorInfoProblem, TransformProblem,
    WriteProblem,
};
pub use gpack_format::ggml::GgmlType;
pub use source::{
    checked_product, Asset, ByteRange, Source, SourceFile, SourceKind, TensorInfo, Transform,
    ASSET_NAMES, FUSED_GROUPS, MAX_LAYERS,
};
pub use value::{Array, GgufString, Metadata, Value, ValueType};
