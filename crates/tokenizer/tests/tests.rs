//! Integration tests of gpack-tokenizer (one binary, modules below).
//!
//! Inputs are in `testdata/tokenizer/` (made by `testdata/tokenizer/scripts/*.py`).

mod common;

mod chat;
mod corpus;
mod deepseek;
mod gbt1;
mod gguf;
mod peer;
mod pretok;
mod props;
mod stream;
