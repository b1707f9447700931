//! Why a quality measurement could not be made.

use std::path::PathBuf;

/// Why a perplexity or KL-divergence run, or its base file, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QualityError {
    /// Reading or writing a file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done ("reading", "writing").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A base file whose bytes are not what llama-perplexity writes.
    #[error("{}: offset {offset}: {problem}", path.display())]
    BadBase {
        /// The file.
        path: PathBuf,
        /// Byte offset of the problem.
        offset: u64,
        /// What was expected and found.
        problem: String,
    },
    /// A base file made with another model (its vocabulary differs).
    #[error(
        "{}: the base log-probs are over {file} tokens but the model has {model}: \
         a base file is only comparable with a model of the same vocabulary",
        path.display()
    )]
    VocabMismatch {
        /// The file.
        path: PathBuf,
        /// The file's vocabulary size.
        file: u32,
        /// The model's.
        model: u32,
    },
    /// Too little text for one chunk of the context.
    #[error(
        "the text tokenizes to {n_tokens} tokens; a context of {n_ctx} needs at least {} \
         (2 × the context, as llama-perplexity requires): give a longer text or a smaller -c",
        2 * n_ctx
    )]
    TooShort {
        /// Tokens of the text.
        n_tokens: usize,
        /// The context asked for.
        n_ctx: usize,
    },
    /// A context too small to score anything.
    #[error("a context of {0} scores no token (its second half minus one): use -c 4 or more")]
    TinyContext(usize),
    /// The model failed.
    #[error(transparent)]
    Model(#[from] crate::Error),
}

impl QualityError {
    /// An I/O error on `path`.
    pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| QualityError::Io { what, path, source }
    }
}
