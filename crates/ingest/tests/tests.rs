//! Integration tests of gpack-ingest (one binary; see STYLE.md).

mod common;
mod ggml_sizes;
mod gguf_read;
mod hf_vs_gguf;
mod malformed_gguf;
mod malformed_safetensors;
mod props;
mod real_model;
mod split;
