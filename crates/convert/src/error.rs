//! Errors of a conversion.

use std::path::PathBuf;

/// What can go wrong converting a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read.
    #[error(transparent)]
    Ingest(#[from] gpack_ingest::Error),
    /// Writing the container failed.
    #[error(transparent)]
    Format(#[from] gpack_format::Error),
    /// Transcoding a tensor failed.
    #[error("tensor {tensor}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (IQ1_S, IQ2_*,
    /// IQ3_*, TQ1_0, TQ2_0, …): refused when planning, before anything is
    /// written.
    #[error(
        "tensor {tensor} has ggml type {ty}, which gpack cannot decode (it decodes {})",
        gpack_quant::ggml::decodable_type_names()
    )]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// The ggml type name.
        ty: &'static str,
    },
    /// The tokenizer could not be built.
    #[error("building the tokenizer")]
    Tokenizer(#[from] gpack_tokenizer::Error),
    /// A tensor cannot be placed as asked.
    #[error("tensor {tensor}: {problem}")]
    Tensor {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// An option does not apply to this source.
    #[error("{0}")]
    Option(String),
    /// The output exists and `--force` was not given.
    #[error("{0} already exists (pass --force to replace it)")]
    OutputExists(PathBuf),
}
