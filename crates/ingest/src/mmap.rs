//! The crate's only `unsafe`: mapping a file read-only.

use std::fs::File;
use std::path::Path;

use crate::error::Error;

/// Maps `file` (opened from `path`) read-only.
#[allow(unsafe_code)]
pub(crate) fn map(file: &File, path: &Path) -> Result<memmap2::Mmap, Error> {
    // SAFETY: `Mmap::map` is unsafe because the mapping aliases the file: if another
    // process truncates or rewrites the file while we hold the map, reads through
    // the `&[u8]` we hand out may fault (SIGBUS) or observe changed bytes, which Rust
    // treats as undefined behaviour. We map read-only, never write through the map,
    // and, like safetensors, candle and ripgrep, accept that model files must not be
    // modified while a `Source` is open; every consumer validates the bytes once at
    // open and treats them as immutable afterwards.
    unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::Io {
        file: path.to_path_buf(),
        what: "map",
        source: e,
    })
}
