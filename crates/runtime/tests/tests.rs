//! Integration tests of gpack-runtime (one binary, modules below).
mod fixtures;
mod gemma3n;
mod generation;
mod gpu_models;
mod gpu_ops;
mod kv_prefix;
mod kv_quant;
mod mla;
mod moe;
mod mtp;
mod ple;
mod smollm2;
mod spec;
mod threads;
