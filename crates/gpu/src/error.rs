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
}
