//! gpack-convert: a model source (GGUF, split GGUF, safetensors, HF directory)
//! → a plan (which tensor goes to which section, in which layout, at which
//! offset) → one streamed, atomic GPACK write.
//!
//! Every offset is computed by the plan before the first byte is written
//! (native encoded sizes are known from shapes), so the index sections can be
//! written first, in kind order, and each tensor is then read, transcoded into
//! its section and dropped: peak memory is one tensor plus buffers, never the
//! model.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod plan;
pub mod sidecar;
pub mod tokenizer;
mod write;

pub use error::Error;
pub use plan::{Fuse, Placement, Plan, PlannedTensor, Quant, FUSED_GROUPS};
pub use write::{convert, ConvertOptions, Progress, Report, SectionReport, TensorReport};
