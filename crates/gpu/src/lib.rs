//! GPU compute for gpack through [wgpu]: Vulkan on Linux and Windows, Metal
//! on macOS, DX12 on Windows, from one WGSL source per kernel.
//!
//! * [`device`]: which adapter to use ([`Want`]), opening it ([`Gpu::open`]),
//!   what it can do ([`Caps`]), and the few primitives every kernel module
//!   uses (pipelines from WGSL, storage buffers, read-back).
//! * [`matvec`]: matrix-vector and matrix-matrix products with a weight on
//!   the device in its file layout ([`GpuMatrix`], [`matmul`]).
//! * [`placement`] and [`upload`]: a weight section packed into as few
//!   device buffers as the adapter's binding limit allows, streamed from the
//!   mapping with its SHA-256 checked on the way.
//!
//! The runtime's model step calls a device seam; this crate is the wgpu side
//! of it. Sampling, grammars and speculation stay on the host.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod device;
mod error;
pub mod matvec;
pub mod ops;
pub mod placement;
pub mod upload;

pub use device::{hardware_gpu_possible, AdapterKind, AdapterSummary, Allow, Caps, Gpu, Want};
pub use error::Error;
pub use matvec::{matmul, matmul_into, GpuMatrix, Out};
