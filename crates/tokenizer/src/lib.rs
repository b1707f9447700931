//! gpack-tokenizer: the GBT1 binary tokenizer, byte-level and SentencePiece-style BPE, and
//! chat templates.
//!
//! * [`TokenizerSpec`] is the plain-data tokenizer built from a Hugging Face
//!   `tokenizer.json` ([`TokenizerSpec::from_hf_json`]) or GGUF metadata
//!   ([`TokenizerSpec::from_gguf`]), written with [`TokenizerSpec::to_gbt1`].
//! * [`Gbt1`] is the zero-copy reader: [`Gbt1::parse`] checks the header and bounds in O(1)
//!   of the vocabulary size; the hash tables the encoder needs are in the file.
//! * [`Tokenizer`] encodes and decodes on a `Gbt1` view; [`StreamDecoder`] releases only
//!   whole characters; [`ChatTemplate`] renders chat templates as `transformers` does.
//!
//! The byte layout is specified in `FORMAT-GBT1.md`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod bpe;
pub mod chat;
mod error;
pub mod gbt1;
pub mod gguf;
pub mod harmony;
mod hf;
mod load;
pub mod pretok;
mod raw;
pub mod spec;
mod stream;
mod tokenizer;
mod write;

pub use chat::{ChatMessage, ChatTemplate};
pub use error::{Error, Result};
pub use gbt1::Gbt1;
pub use gguf::GgufMeta;
pub use load::{load_any, LoadedTokenizer};
pub use spec::{GgufPre, MergeMode, ModelKind, PreTokenizer, SpecToken, TokenType, TokenizerSpec};
pub use stream::StreamDecoder;
pub use tokenizer::Tokenizer;
