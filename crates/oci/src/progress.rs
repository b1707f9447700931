//! Progress callbacks of push and pull, called from the transfer tasks.
//! `id` is a layer digest; the CLI draws one bar per layer and one for the
//! whole.

/// Observer of a transfer.
pub trait Progress: Send + Sync {
    /// The whole transfer moves `bytes` (of which `done` need no transfer).
    fn total(&self, _bytes: u64, _done: u64) {}
    /// Layer `id` (`label`: its section name) of `bytes` starts, `done` of
    /// them already present (a resumed partial download).
    fn begin(&self, _id: &str, _label: &str, _bytes: u64, _done: u64) {}
    /// `bytes` more bytes of layer `id` moved.
    fn advance(&self, _id: &str, _bytes: u64) {}
    /// Layer `id` is finished.
    fn end(&self, _id: &str) {}
}

/// No progress output.
pub struct Quiet;

impl Progress for Quiet {}
