//! The one error type of this crate.

/// Errors of model loading and generation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A required metadata key is missing or has the wrong type.
    #[error("metadata key {key} is missing or not a {what}")]
    Metadata {
        /// The key, e.g. `llama.block_count`.
        key: String,
        /// The expected kind of value.
        what: &'static str,
    },
    /// The architecture is not one this runtime has a graph for.
    #[error("unsupported architecture {arch:?}")]
    Architecture {
        /// `general.architecture`.
        arch: String,
    },
    /// A required tensor is absent.
    #[error("tensor {name} is missing")]
    MissingTensor {
        /// GGUF tensor name.
        name: String,
    },
    /// A tensor has a shape the graph does not accept.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// GGUF tensor name.
        name: String,
        /// Expected dims, ne0 first.
        expected: Vec<u64>,
        /// Found dims, ne0 first.
        found: Vec<u64>,
    },
    /// A tensor is stored in a type the runtime cannot use there.
    #[error("tensor {name}: {what} does not support type {ty}")]
    TensorType {
        /// GGUF tensor name.
        name: String,
        /// What would have used it (e.g. "norm weight").
        what: &'static str,
        /// The ggml type name.
        ty: &'static str,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (IQ1_S, IQ2_*,
    /// IQ3_*, TQ1_0, TQ2_0, …): refused when the model is bound, before any
    /// kernel would meet it.
    #[error(
        "tensor {name} has ggml type {ty}, which gpack cannot decode (it decodes {})",
        gpack_quant::ggml::decodable_type_names()
    )]
    UnsupportedType {
        /// Tensor name (or, for an expert slice, where it lives).
        name: String,
        /// The ggml type name.
        ty: &'static str,
    },
    /// A section of a .gpack holds something this runtime cannot use there
    /// (a tensor outside its section, a type it does not know, a row out of
    /// range); the container itself validated.
    #[error("{section} section: {problem}")]
    Section {
        /// The section's kind.
        section: gpack_format::SectionKind,
        /// What is wrong.
        problem: String,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    Token {
        /// The id.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// The KV cache is full.
    #[error("context full: {needed} positions needed, the cache holds {capacity}")]
    ContextFull {
        /// Positions the call needs.
        needed: usize,
        /// Positions the cache holds.
        capacity: usize,
    },
    /// A hyperparameter value the graph cannot run with.
    #[error("invalid hyperparameter {what}: {value}")]
    Hparam {
        /// Which hyperparameter.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// An expert slice cannot be used (a corrupted external shard, a wrong
    /// shape, a missing slice).
    #[error("layer {layer} expert {expert} {part} slice ({origin}): {problem}")]
    ExpertSlice {
        /// Layer.
        layer: usize,
        /// Expert.
        expert: usize,
        /// gate, up or down.
        part: &'static str,
        /// Where it lives.
        origin: String,
        /// What is wrong.
        problem: String,
    },
    /// Reading the source model failed.
    #[error("reading the model")]
    Ingest(#[from] gpack_ingest::Error),
    /// A .gpack file is invalid.
    #[error("reading the .gpack file")]
    Gpack(#[from] gpack_format::Error),
    /// A native tensor could not be made or read.
    #[error("native tensor {name}")]
    Quant {
        /// GGUF tensor name.
        name: String,
        /// The cause.
        #[source]
        source: gpack_quant::Error,
    },
    /// `gpack export` cannot write a tensor or the file as asked.
    #[error("exporting {file} to GGUF: {problem}")]
    Export {
        /// The .gpack.
        file: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The tokenizer failed to load.
    #[error("tokenizer")]
    Tokenizer(#[from] gpack_tokenizer::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
