//! gpack-format: the GPACK v1 and GIW containers (raw structs, reader, writer).
//! No model semantics live here; see `docs/FORMAT.md` for the normative layout.
#![deny(missing_docs)]

pub mod ggml;
