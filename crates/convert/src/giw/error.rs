//! The errors of building a `.giw` bundle.

/// Errors of [`super::prequant`] and [`super::ensure_sidecar`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read.
    #[error(transparent)]
    Ingest(#[from] gpack_ingest::Error),
    /// Writing or reading the bundle failed.
    #[error(transparent)]
    Giw(#[from] gpack_format::giw::Error),
    /// Transcoding or quantizing a tensor failed.
    #[error("tensor {tensor}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (refused before
    /// the bundle is created).
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
    /// An option does not apply.
    #[error(transparent)]
    Option(#[from] crate::OptionProblem),
}
