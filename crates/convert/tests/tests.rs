//! Tests of gpack-convert on the committed tiny fixtures and the real SmolLM2.

mod common;
mod convert;
mod quantize;
