//! The crate's error type (start-up failures; request failures are
//! [`crate::api::ApiError`] responses, never this).

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model file could not be opened or bound.
    #[error("loading model {path}")]
    Model {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<gpack_runtime::Error>,
    },
    /// A registry reference could not be pulled into the local store.
    #[cfg(feature = "registry")]
    #[error("pulling {reference}")]
    Pull {
        /// The reference.
        reference: String,
        /// Why.
        #[source]
        source: Box<gpack_oci::Error>,
    },
    /// A prequantized .giw bundle could not be opened.
    #[error("loading bundle {path}")]
    Giw {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<gpack_runtime::giw::GiwError>,
    },
    /// The model's tokenizer could not be read.
    #[error("tokenizer of {path}")]
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
    /// The model's chat template does not compile.
    #[error("the model's chat template")]
    Template(#[source] Box<gpack_tokenizer::Error>),
    /// An option is out of range.
    #[error("invalid option {what}: {value}")]
    Option {
        /// Which option.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// Binding the listening socket or serving failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The decoding thread panicked.
    #[error("the decoding thread panicked")]
    EnginePanic,
    /// `--verify before`: a section does not match its digest.
    #[error("{0}")]
    Integrity(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
