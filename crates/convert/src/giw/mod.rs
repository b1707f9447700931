//! `.giw` bundles (docs/GIW.md): the streaming prequantizer behind `gpack
//! prequant` ([`prequant`]) and the `<model>.<quant>.<target>.giw` sidecars
//! of `--stream-weights` ([`ensure_sidecar`]).
//!
//! Files: `build` (options, the streamed write, the report), `units` (the
//! tensors and fused groups a bundle is built in), `record` (one unit
//! encoded into one record), `metadata` (the metadata GGUF ahead of the
//! records), `sidecar` (a GGUF's sidecar: its path, staleness, rebuild),
//! `error`.
//!
//! # Streaming
//!
//! The source is read one *unit* at a time (a tensor, or a fused q‖k‖v /
//! gate‖up group for `--target metal`), in source order: its bytes are read
//! from the mapping, transcoded or quantized into one aligned buffer, appended
//! to the bundle ([`gpack_format::giw::GiwWriter`]), and the buffer is freed
//! and the source pages released ([`gpack_ingest::SourceFile::release`]). So
//! peak memory is the largest unit's source bytes plus its encoded bytes, for
//! GGUF and safetensors sources alike, never the model. Quantizing from a
//! ggml block type (re-quantizing) dequantizes one row at a time
//! ([`crate::encode`], shared with `gpack convert`).
//! [`PrequantOptions::resident`] reads every tensor into memory first instead;
//! it exists only to prove the output is byte-identical to the streamed one.
//!
//! # Quant
//!
//! [`crate::policy`] decides every matrix's layout, as for `gpack convert`,
//! with the GIW container's exact layouts (`native_layout_for`: the
//! row-major split layouts of weights formats 12–14, no Rows16). `keep`:
//! every matrix exact. `int8`/`int8int8`: I8Sym G32 (int8int8 records that
//! activations are int8 too, which the kernels always do); `int4`: I4Asym
//! G32; sources already at that precision (Q8_0, Q5_0 for int8; Q4_0,
//! Q4_1, Q4_K for int4), embedding tables, and matrices whose cols are not a
//! multiple of 32 are transcoded exactly instead. 1-D tensors are stored raw
//! (dense records).
//!
//! # Fused groups and f16 scales (metal)
//!
//! Weights format 13+: q‖k‖v and gate‖up of one layer become one group record
//! when [`crate::policy::fuses`] says so for a .giw: every member exists, is
//! 2-D, has the same source type and cols, and ends up int4 G32; otherwise
//! (a K=V layer without v, int8 members, mixed cols or types) the members are
//! ordinary records. Quantizers and transcoders are row-independent, so a
//! group's tensor is the members' rows concatenated and encoded once.
//! Weights format 14+: an f16 copy of the scales is added to every scaled
//! tensor whose scales are all exactly representable in f16.

mod build;
mod error;
mod metadata;
mod record;
mod sidecar;
mod units;

pub use build::{prequant, prequant_source, PrequantOptions, PrequantReport};
pub use error::Error;
pub use sidecar::{check_sidecar, ensure_sidecar, sidecar_for, SidecarStatus, StaleSidecar};
