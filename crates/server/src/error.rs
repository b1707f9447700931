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
    /// A model file could not be opened (weights, bundle or tokenizer).
    #[error(transparent)]
    Open(#[from] gpack_runtime::OpenError),
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
    /// The prefix cache (its directory) could not be set up.
    #[error(transparent)]
    KvCache(Box<gpack_runtime::kvcache::KvCacheError>),
    /// The decoding thread panicked.
    #[error("the decoding thread panicked")]
    EnginePanic,
    /// `--verify before`: a section does not match its digest, or the file
    /// no longer validates.
    #[error(transparent)]
    Integrity(#[from] crate::integrity::Problem),
}

pub(crate) use gpack_runtime::open::named;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
