//! The crate's error type.

/// What can go wrong opening or using a GPU.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No adapter matched the request (`tried` says what was looked for and
    /// what was found).
    #[error("no GPU adapter: {tried}")]
    NoAdapter {
        /// What was looked for and what was found.
        tried: String,
    },
    /// The adapter refused to open a device.
    #[error("GPU adapter {adapter:?} refused to open a device: {why}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// The driver's message.
        why: String,
    },
    /// The device was lost (driver reset, removed GPU) or an operation on it
    /// failed.
    #[error("GPU device lost or failed: {0}")]
    Device(String),
    /// A WGSL shader did not compile or validate.
    #[error("shader {label}: {why}")]
    Shader {
        /// The shader's label.
        label: String,
        /// The validator's message.
        why: String,
    },
    /// A buffer would exceed what the adapter allows.
    #[error("{what}: {bytes} bytes exceed the adapter's limit of {limit}")]
    TooLarge {
        /// What was being allocated.
        what: String,
        /// Requested bytes.
        bytes: u64,
        /// The adapter's limit.
        limit: u64,
    },
    /// The driver is out of device memory for a buffer (a wgpu
    /// out-of-memory error scope caught it).
    #[error("out of device memory allocating {what} ({bytes} bytes): {why}")]
    OutOfMemory {
        /// The buffer.
        what: String,
        /// Its bytes.
        bytes: u64,
        /// The driver's message.
        why: String,
    },
    /// wgpu refused a buffer (a validation error scope caught it): over
    /// the adapter's largest buffer, or otherwise not allowed.
    #[error("allocating {what} ({bytes} bytes; the adapter's largest buffer is {limit}) was refused: {why}")]
    Allocation {
        /// The buffer.
        what: String,
        /// Its bytes.
        bytes: u64,
        /// The adapter's largest buffer.
        limit: u64,
        /// wgpu's message.
        why: String,
    },
    /// A weight layout no GPU kernel reads (the caller adds the tensor's
    /// name).
    #[error("layout {layout}: {why}")]
    Layout {
        /// The layout's name ([`gpack_quant::Layout::name`]).
        layout: &'static str,
        /// Why it is refused.
        why: &'static str,
    },
    /// A native tensor's bytes do not parse.
    #[error("native tensor does not parse")]
    Tensor(#[from] gpack_quant::Error),
    /// A buffer, binding or offset does not fit the operation.
    #[error("{what}: needs {needed} bytes, has {have}")]
    Size {
        /// What was checked.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes there.
        have: u64,
    },
    /// A section's tensors cannot be placed as described (out of the
    /// section, overlapping, a row cut that does not match the length).
    #[error("placing {}: {why}", tensor.map_or("a section".to_string(), |t| format!("tensor {t}")))]
    Placement {
        /// The tensor's position in the list, when one is at fault.
        tensor: Option<usize>,
        /// What is wrong.
        why: String,
    },
    /// A section's bytes did not hash to the SHA-256 the file records for
    /// it while they streamed to the device; its buffers were dropped.
    #[error(
        "section {section}: SHA-256 of the bytes uploaded is {found}, the file records {expected}: \
         the file is damaged (its weights are not the ones it was written with)"
    )]
    Digest {
        /// The section's name.
        section: String,
        /// The digest the file records (hex).
        expected: String,
        /// The digest of the bytes (hex).
        found: String,
    },
}
