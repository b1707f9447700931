//! Errors of push, pull and the store.

use std::path::PathBuf;

/// What can go wrong moving a model through a registry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The REF argument does not parse.
    #[error(
        "{reference:?} is not a registry reference ({reason}); expected host[:port]/repo[:tag|@sha256:HEX]"
    )]
    BadReference {
        /// What was given.
        reference: String,
        /// Why it does not parse.
        reason: String,
    },
    /// `--insecure` asked for a registry that is not on this machine.
    #[error(
        "--insecure (plain HTTP, no TLS) is refused for {host}: only a loopback registry (localhost, 127.0.0.0/8, [::1]) may be reached without TLS"
    )]
    InsecureNotLoopback {
        /// The registry host.
        host: String,
    },
    /// The registry answered 401 Unauthorized.
    #[error(
        "registry {registry}: 401 Unauthorized while {what} (credentials: {credentials}); pass --username and --password (or GPACK_REGISTRY_USERNAME / GPACK_REGISTRY_PASSWORD), or log in with `docker login {registry}`"
    )]
    Unauthorized {
        /// Registry host.
        registry: String,
        /// The operation.
        what: String,
        /// Where the credentials came from ("none (anonymous)", "flags", …).
        credentials: String,
    },
    /// Any other registry or transport failure.
    #[error("registry {registry}: {what}")]
    Registry {
        /// Registry host.
        registry: String,
        /// The operation.
        what: String,
        /// The client's error.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// A manifest or config from the registry is not what gpack expects.
    #[error("{what}: {problem}")]
    BadArtifact {
        /// Which document ("manifest of REF", "config blob sha256:…").
        what: String,
        /// What is wrong, with the expected and found values.
        problem: String,
    },
    /// A downloaded layer does not hash to its digest.
    #[error(
        "section {section} (layer {digest}): the {size} bytes received hash to sha256:{actual}; the blob in the registry is damaged (the partial download was deleted)"
    )]
    DigestMismatch {
        /// Section name (or "gguf").
        section: String,
        /// The layer digest.
        digest: String,
        /// Bytes received.
        size: u64,
        /// What they hash to.
        actual: String,
    },
    /// A layer's stream ended early or ran long.
    #[error("section {section} (layer {digest}): expected {expected} bytes, received {found}")]
    SizeMismatch {
        /// Section name.
        section: String,
        /// The layer digest.
        digest: String,
        /// Size in the manifest.
        expected: u64,
        /// Bytes received so far.
        found: u64,
    },
    /// The assembled file's digest differs from the manifest's annotation.
    #[error(
        "{path}: the assembled file's digest sha256:{found} differs from the manifest annotation {expected}"
    )]
    FooterMismatch {
        /// The file (its temporary name; it was removed).
        path: PathBuf,
        /// The annotation.
        expected: String,
        /// The footer's manifest SHA-256.
        found: String,
    },
    /// A local file operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The docker config file is unreadable or malformed.
    #[error("docker config {path}: {problem}")]
    DockerConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A .gpack error (opening the file to push, or checking the assembled one).
    #[error(transparent)]
    Format(#[from] gpack_format::Error),
    /// Converting a pulled GGUF failed.
    #[error("converting the pulled GGUF")]
    Convert(#[from] gpack_convert::Error),
    /// The reference is not in the local store.
    #[error("{0} is not in the local store (gpack ls lists what is)")]
    NotInStore(String),
}

/// `Result` with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `map_err` helper for io errors.
pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}
