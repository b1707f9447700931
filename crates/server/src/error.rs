//! The crate's error type (start-up failures; request failures are
//! [`crate::api::ApiError`] responses, never this).

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model file could not be opened or bound.
    #[error("{}", named(("loading model", "loading the model"), path, &**source))]
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
    #[error("{}", named(("loading bundle", "loading the bundle"), path, &**source))]
    Giw {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<gpack_runtime::giw::GiwError>,
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
    /// The listening socket could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// The address asked for (`host:port`).
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An I/O operation of serving failed.
    #[error("{what}")]
    Io {
        /// What was being done ("starting the async runtime"...).
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The decoding thread panicked.
    #[error("the decoding thread panicked")]
    EnginePanic,
    /// `--verify before`: a section does not match its digest, or the file
    /// no longer validates.
    #[error(transparent)]
    Integrity(#[from] crate::integrity::Problem),
}

/// `what.0 path`, or `what.1` alone when a cause below names `path`
/// already (a file's open error does): each path is printed once along an
/// error chain, whichever layer knows it.
pub(crate) fn named(
    what: (&str, &str),
    path: &str,
    source: &(dyn std::error::Error + 'static),
) -> String {
    if crate::load::chain(source).contains(path) {
        what.1.to_string()
    } else {
        format!("{} {path}", what.0)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
