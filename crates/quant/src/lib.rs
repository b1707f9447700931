//! gpack-quant: native weight layouts, exact transcoders from ggml blocks,
//! int8/int4 quantizers and the matrix-vector kernels that run on them.
//!
//! # Why a native layout
//!
//! ggml stores an array of blocks (scale next to codes). SIMD kernels want the
//! opposite: one contiguous array of codes and separate contiguous arrays of
//! per-group scales (and mins), every array 16-byte aligned, so both can be
//! aliased from a read-only mapping and loaded without a copy (DESIGN.md,
//! "Native weight layouts"). Every ggml type we can decode exactly maps to one
//! native layout ([`native_layout_for`]); the rest are kept byte for byte
//! ([`Layout::Ggml`]) and only get a slow dequantizing path.
//!
//! # The canonical layout: ggml's blocks, row-interleaved
//!
//! What a `.gpack` stores for every quantized ggml type (and what the
//! runtime transcodes GGUF/HF sources into) is [`Layout::Rows16`]: ggml's own
//! block bytes, 16 rows interleaved field by field ([`interleave`]), so the
//! file is no larger than the GGUF and a 64-byte load is one lane per row,
//! the operand of the kernels ([`kernels::rows16`]). [`canonical_layout_for`]
//! is the one place that decides it. The row-major split layouts below
//! remain for GIW bundles and `--quant int8|int4`.
//!
//! # Modules
//!
//! * [`layout`]: [`Layout`], its stable codes, and the 64-byte
//!   [`NativeTensorHeader`] that starts every serialized native tensor.
//! * [`interleave`]: the normative Rows16 byte order (field tables per type,
//!   interleave and gather).
//! * [`ggml`]: ggml block decoding ([`dequantize_ggml`], the reference side of
//!   every exactness test) and the per-block split into codes/scales/mins.
//! * [`mod@transcode`]: [`canonical_layout_for`] (the one layout policy),
//!   [`fn@transcode`] (ggml → native, exact), [`quantize`]
//!   (F32/F16/BF16 or any decodable ggml type → int8/int4, one row at a
//!   time) and [`write_with_f16_scales`] (adds the
//!   optional f16 copy of the scales when it is exact).
//! * [`view`]: [`NativeView`], the validated borrowed view over a serialized
//!   native tensor.
//! * [`kernels`]: [`matvec`]/[`matmul`] with run-time ISA dispatch and the
//!   scalar reference [`matvec_ref`].
//! * [`pool`]: the persistent thread pool the kernels split rows over.
//!
//! # Exactness
//!
//! "Exact" means: dequantizing a native tensor ([`NativeView::dequantize_row`])
//! gives the same f32 bits as ggml's (and the `gguf` Python package's)
//! dequantization of the source blocks. Every value is computed as
//! `q as f32 * scale` (symmetric) or `q as f32 * scale + min` (asymmetric), in
//! f32, without fused multiply-add; scales and mins are the f32 values ggml
//! forms before its last multiply (K-quant sub-scales folded: `d * sc`,
//! `-(dmin * m)`, products of an f16 and a 6-bit integer, exact in f32), and
//! `a - b == a + (-b)` holds bit for bit in IEEE 754, signed zeros included.
//! NaN and infinite f16 scales are outside the guarantee (their NaN payloads
//! may differ); finite, subnormal and negative-zero scales are inside it.
//!
//! # Environment
//!
//! Nothing hardware-specific is stored in a file (DESIGN.md); at run time:
//! `GPACK_ISA=scalar|avx2|avxvnni|avx512vnni` caps the kernel path (CI runs
//! the tests with `scalar` to cover "SIMD off"), `GPACK_THREADS` sizes
//! [`Pool::global`] (this crate's tests, benchmarks and examples; the
//! runtime passes each model's own [`Pool`] to the kernels), `GPACK_SPIN_US` sets how long idle workers spin before
//! parking (default 50). The chosen path is logged at debug level.

#![deny(missing_docs)]

mod aligned;
pub mod ggml;
pub mod interleave;
pub mod kernels;
pub mod layout;
pub mod pool;
pub mod quantize;
pub mod transcode;
pub mod view;

pub use aligned::AlignedBuf;
pub use ggml::dequantize_ggml;
pub use gpack_format::ggml::GgmlType;
pub use kernels::peak::{int8_peak, Int8Peak};
pub use kernels::{
    matmul, matmul_concat, matmul_concat_on, matmul_on, matmul_ref, matmul_with, matvec, matvec_on,
    matvec_ref, matvec_with, Isa, QuantizedActivations,
};
pub use layout::{can_fuse, encoded_len, native_layout_for, Layout, NativeTensorHeader};
pub use pool::Pool;
pub use transcode::{
    canonical_layout_for, f16_scales_exact_for, f16_scales_if_exact, quantize,
    quantize_with_f16_scales, transcode, transcode_canonical, transcode_with_f16_scales,
    write_native, write_with_f16_scales,
};
pub use view::NativeView;

/// Errors of this crate. Parsers of untrusted bytes return these; they never panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size computation overflowed `u64`/`usize`.
    #[error("size overflow computing {what}")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// A buffer is shorter than its declared contents.
    #[error("{what} is truncated: need {needed} bytes, have {have}")]
    Truncated {
        /// Which buffer.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        have: u64,
    },
    /// A header field holds a value this reader does not accept.
    #[error("invalid {what}: {value}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// An array offset is not where the canonical layout puts it.
    #[error("{what} offset is {found}, expected {expected}")]
    Offset {
        /// Which array.
        what: &'static str,
        /// Offset the canonical layout requires.
        expected: u64,
        /// Offset found in the header.
        found: u64,
    },
    /// A shape does not fit a layout or a type (e.g. cols not a multiple of the group).
    #[error("shape {rows}x{cols} does not fit {what}")]
    Shape {
        /// Layout or type name.
        what: &'static str,
        /// Rows (ne1).
        rows: u64,
        /// Cols (ne0).
        cols: u64,
    },
    /// The operation does not support this ggml type or layout.
    #[error("{what} does not support {name}")]
    Unsupported {
        /// Operation.
        what: &'static str,
        /// Type or layout name.
        name: &'static str,
    },
    /// Writing the output failed.
    #[error("writing native tensor")]
    Io(#[from] std::io::Error),
}

/// Checked `a * b` for size math (STYLE.md: all size math goes through here).
pub(crate) fn mul(a: u64, b: u64, what: &'static str) -> Result<u64, Error> {
    a.checked_mul(b).ok_or(Error::Overflow { what })
}

/// Checked `a + b` for size math.
pub(crate) fn add(a: u64, b: u64, what: &'static str) -> Result<u64, Error> {
    a.checked_add(b).ok_or(Error::Overflow { what })
}

/// Round `a` up to a multiple of 16, checked.
pub(crate) fn align16(a: u64, what: &'static str) -> Result<u64, Error> {
    Ok(add(a, 15, what)? & !15)
}

/// `u64` → `usize`, checked (a 32-bit target may not address it).
pub(crate) fn to_usize(a: u64, what: &'static str) -> Result<usize, Error> {
    usize::try_from(a).map_err(|_| Error::Overflow { what })
}
