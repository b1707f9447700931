//! Model quality on a text, as llama.cpp's `llama-perplexity` measures it:
//! chunked perplexity ([`chunks`]: the same chunking, BOS rule and
//! first-half skip), the per-row log-softmax and its 16-bit quantized form
//! ([`logprob`]), the `--kl-divergence-base` file of saved base log-probs
//! ([`base`], byte for byte llama-perplexity's format, so either tool's file
//! serves the other) and the statistics printed from them ([`stats`]: PPL
//! with its error, KL-divergence mean and percentiles, top-1 agreement, Δp).
//!
//! `gpack perplexity` is a thin front end over this module.

pub mod base;
pub mod chunks;
mod error;
pub mod logprob;
pub mod stats;

pub use base::{BaseHeader, BaseReader, BaseWriter};
pub use chunks::{chunk_logits, Chunking};
pub use error::QualityError;
pub use stats::{KlAccum, KlSummary, Percentiles, PplAccum};
