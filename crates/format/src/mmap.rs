//! Read-only memory maps: the one place outside the kernels with `unsafe`.
#![allow(unsafe_code)]

use std::fs::File;

pub use memmap2::Mmap;

/// Maps `file` read-only.
///
/// The mapping is private and read-only, so this process cannot change the
/// file through it. Another process truncating or rewriting the file while it
/// is mapped could change what the reader sees (or raise SIGBUS); gpack never
/// writes a file in place (every write goes to a temporary file that is
/// renamed over the destination), so a file we map is never modified by us.
/// That is the same contract ripgrep and the `safetensors` loaders rely on.
pub fn map_file(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: see the function docs: the file is only ever replaced by an
    // atomic rename, never modified in place, by gpack; a mapping keeps the
    // old inode alive after such a rename.
    unsafe { memmap2::MmapOptions::new().map(file) }
}
