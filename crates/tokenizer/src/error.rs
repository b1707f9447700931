//! The crate's one error type.
//!
//! Structured variants with `&'static str` nouns, so a caller can tell *which* count or
//! offset was wrong without parsing a message (STYLE.md, "Errors").

/// Everything that can go wrong while building, parsing or using a tokenizer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes do not start with the GBT1 magic.
    #[error("bad GBT1 magic: expected {expected:#010x}, found {found:#010x}")]
    BadMagic {
        /// `0x31544247`.
        expected: u32,
        /// What the first four bytes held.
        found: u32,
    },
    /// The input is shorter than a structure that must be there.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// A version this reader does not understand.
    #[error("unsupported GBT1 version {found} (this reader reads up to {max})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u16,
        /// Highest version this reader reads.
        max: u16,
    },
    /// Header flags with bits this reader does not know.
    #[error("unknown GBT1 flags {flags:#010x}")]
    UnknownFlags {
        /// The unknown bits.
        flags: u32,
    },
    /// A field holds a value outside its allowed range or inconsistent with another field.
    #[error("invalid {what}: {value} (limit {limit})")]
    Invalid {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit or expected value it broke.
        limit: u64,
    },
    /// Size arithmetic overflowed.
    #[error("overflow computing {what}")]
    Overflow {
        /// The quantity being computed.
        what: &'static str,
    },
    /// The total size in the header does not match the bytes given.
    #[error("GBT1 size mismatch: header says {expected} bytes, have {found}")]
    SizeMismatch {
        /// `total_size` from the header.
        expected: u64,
        /// Length of the slice.
        found: u64,
    },
    /// A token id out of range.
    #[error("token id {id} out of range (vocab size {vocab_size})")]
    TokenOutOfRange {
        /// The id.
        id: u64,
        /// The vocabulary size.
        vocab_size: u64,
    },
    /// A source (tokenizer.json, GGUF metadata) lacks a required field.
    #[error("missing {what}")]
    Missing {
        /// The field or key.
        what: &'static str,
    },
    /// A source field has an unsupported value (a model type, pre-tokenizer, normalizer...).
    #[error("unsupported {what}: {value:?}")]
    Unsupported {
        /// The field.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A token string in a source is not what the model kind needs.
    #[error("bad {what} at index {index}")]
    BadEntry {
        /// Which list.
        what: &'static str,
        /// Index in that list.
        index: u64,
    },
    /// JSON that does not parse.
    #[error("invalid JSON in {what}")]
    Json {
        /// Which document.
        what: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A chat template that fails to compile or render.
    #[error("chat template {what}")]
    Template {
        /// "compile" or "render".
        what: &'static str,
        /// minijinja's error.
        #[source]
        source: minijinja::Error,
    },
    /// An I/O error while reading a file given by path.
    #[error("reading {path}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checked `a + b`.
pub(crate) fn add(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_add(b).ok_or(Error::Overflow { what })
}

/// Checked `a * b`.
pub(crate) fn mul(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_mul(b).ok_or(Error::Overflow { what })
}
