//! gpack-format: the GPACK v1 container (and, later, GIW bundles): raw
//! structs, a streaming atomic writer, a quick-validating zero-copy reader and
//! full SHA-256 verification. No model semantics live here; the normative
//! byte layout is `docs/FORMAT.md`.
//!
//! ```no_run
//! use gpack_format::{GpackWriter, WriteOptions, SectionKind, ManifestInput, Gpack};
//! # fn main() -> Result<(), gpack_format::Error> {
//! let out = std::path::Path::new("model.gpack");
//! let mut w = GpackWriter::create(out, WriteOptions::default())?;
//! w.add_section(SectionKind::MetadataKv, "metadata_kv", b"...", 1)?;
//! w.finish(&ManifestInput { name: "demo".into(), ..Default::default() })?;
//! let g = Gpack::open(out)?; // quick open: magics, versions, size, table, manifest
//! g.verify_full(&|_| {})?;   // every section's SHA-256
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod atomic;
pub mod cursor;
mod error;
mod external;
pub mod ggml;
pub mod giw;
mod kind;
pub mod manifest;
pub mod mmap;
pub mod payload;
pub mod raw;
mod read;
pub mod temp;
mod write;

pub use atomic::AtomicFile;
pub use error::{
    error_chain, job_context, DigestFailure, Error, ExternalProblem, NamesFile, Result,
    SectionProblem,
};
pub use kind::{HeaderFlags, SectionKind};
pub use manifest::ManifestProblem;
pub use manifest::{Manifest, ManifestInput, ManifestSection};
pub use payload::PayloadProblem;
pub use read::{parse_layout, single_tensor, verify_payloads, Gpack, Layout, Section, SectionInfo};
pub use temp::{remove_live_temp_files, remove_stale_temps, temp_files_of};
pub use write::{publish, GpackWriter, SectionWriter, WriteOptions, Written};
