//! Integration tests of gpack-runtime (one binary, modules below).
mod fixtures;
mod generation;
mod ple;
mod smollm2;
