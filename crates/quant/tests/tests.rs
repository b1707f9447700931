//! gpack-quant integration tests (one binary, modules per concern).

mod common;
mod exact;
mod kernels;
mod kvq;
mod parse;
mod pool;
mod quantizers;
mod rows16;
